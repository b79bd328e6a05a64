//! Idempotent edits recording JSON Patch operations.
