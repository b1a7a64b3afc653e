//! alpha-ir
