//! systems
