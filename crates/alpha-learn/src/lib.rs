//! alpha-learn
