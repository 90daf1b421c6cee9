"""This machine's processes: a private Redis and PostgreSQL, the lifeline and stop signals of an embedded crawl."""
