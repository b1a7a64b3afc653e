//! alpha-data
