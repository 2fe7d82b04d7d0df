"""The project's own red-team suite: hostile bytes, files, servers and lifecycles."""
