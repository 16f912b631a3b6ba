"""What the suites share: where the repository's files are, kubectl and bounded waits against the
cluster under test, the sandboxes by profile, and loopback servers. One place each, so a helper
behaves the same in every suite."""
