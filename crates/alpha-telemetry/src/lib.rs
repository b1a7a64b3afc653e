//! alpha-telemetry
