"""The crawler's records in Redis: key names, the connection, a job's settings and log, nodes, store errors."""
