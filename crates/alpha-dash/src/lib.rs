//! alpha-dash
