//! Hostile input against the real binary: each test drives one attack that
//! once stalled, exhausted or silently disabled kadmit, and checks the bound
//! that now holds (memory from `/proc`, CPU time, answers), with generous
//! margins. Every test is bounded in count and time and talks to 127.0.0.1
//! only.

mod reviews;

/// What `/proc/<pid>/status` says about a process's memory, in bytes.
pub struct Memory {
    /// Resident set size now (`VmRSS`).
    pub rss: u64,
    /// The largest resident set size so far (`VmHWM`).
    pub peak: u64,
}

/// The memory of process `pid`.
pub fn memory(pid: u32) -> Memory {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/status: {error}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    Memory {
        rss: field("VmRSS:"),
        peak: field("VmHWM:"),
    }
}

/// CPU time (user + system) process `pid` has used, in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/stat: {error}"));
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let clock_ticks_per_second = 100.0;
    (ticks(11) + ticks(12)) as f64 / clock_ticks_per_second
}

/// Mebibytes, for messages.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}
