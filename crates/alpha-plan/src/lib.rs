//! alpha-plan
