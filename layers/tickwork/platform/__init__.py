"""The platform: database, named SQL, queues, configuration, time, observability, errors."""
