"""The engine: the fd and its counted write, the polls, the router and the waits, the channel, an
id's life and verbs, its events and memberships."""
