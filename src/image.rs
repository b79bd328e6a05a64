//! Container image references.
