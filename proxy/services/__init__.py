"""The proxy's synchronous work on the database: who calls, the session, the transcript sync, the reply."""
