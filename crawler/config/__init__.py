"""Configuration: settings, scope patterns, schedules, credentials and secrets, redaction."""
