//! alpha-grad
