//! alpha-run
