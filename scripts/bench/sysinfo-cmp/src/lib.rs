//! Empty: the benchmark is in benches/sysinfo.rs.
