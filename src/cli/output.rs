//! Where the subcommands write: stdout that tolerates its reader going away,
//! and stderr lines that never fail a command.
//!
//! `println!` panics when stdout is a pipe whose reader has gone
//! (`kadmit test ... | head -c1`): Rust ignores SIGPIPE, so the write fails
//! with `BrokenPipe` instead of ending the process. A reader that stops
//! reading has all it wanted; that is not an error of the command. So the
//! commands write through [`Output`], which turns a broken pipe into "stop
//! writing, carry on", and the command's exit code still says what it found.
//! Every other write error (a full disk) is returned to the caller.
//!
//! The crate denies `clippy::print_stdout` and `clippy::print_stderr` so no
//! `println!` creeps back.

use std::fmt;
use std::io::{self, BufWriter, StdoutLock, Write};

/// A writer that discards everything after its reader has gone.
#[derive(Debug)]
pub struct Output<W> {
    inner: W,
    closed: bool,
}

impl Output<StdoutLock<'static>> {
    /// The process's stdout, locked for the life of the command.
    pub fn stdout() -> Self {
        Output::new(io::stdout().lock())
    }
}

/// How much [`Output::stdout_in_blocks`] holds before writing.
const BLOCK_BYTES: usize = 64 << 10;

impl Output<BufWriter<StdoutLock<'static>>> {
    /// The process's stdout written in 64 KiB blocks, for a command that
    /// writes a line per input object (`kadmit audit`): locked stdout
    /// writes at every newline, a system call per object. What is held is
    /// written by [`Write::flush`], or when the writer is dropped.
    pub fn stdout_in_blocks() -> Self {
        Output::new(BufWriter::with_capacity(BLOCK_BYTES, io::stdout().lock()))
    }
}

impl<W: Write> Output<W> {
    /// Writes to `inner`.
    pub fn new(inner: W) -> Self {
        Output {
            inner,
            closed: false,
        }
    }

    /// True once a write found the reader gone; later output was discarded.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn absorb<T>(&mut self, result: io::Result<T>, all: T) -> io::Result<T> {
        match result {
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(all)
            }
            result => result,
        }
    }
}

impl<W: Write> Write for Output<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let result = self.inner.write(buf);
        self.absorb(result, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let result = self.inner.flush();
        self.absorb(result, ())
    }
}

/// `text` whole, with every control character written as an escape
/// (`\n` as `\u{a}`, ESC as `\u{1b}`), for text taken from an input (a
/// suite's case name, a rule's message, a review's field) on a line a
/// terminal or a CI log shows: a newline would forge a line of its own, a
/// carriage return or an escape sequence overwrite what is on the screen.
/// [`crate::excerpt::printable`] without its cut.
pub fn escaped(text: &str) -> String {
    crate::excerpt::printable(text, usize::MAX)
}

/// Writes one line to stderr, ignoring failure: there is nowhere left to
/// report that stderr itself is gone.
pub fn stderr_line(line: impl fmt::Display) {
    let _ = writeln!(io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts `room` bytes, then fails every write with `kind`.
    struct Failing {
        room: usize,
        kind: io::ErrorKind,
        written: Vec<u8>,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(self.kind.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.written.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn escaped_text_keeps_every_character_and_shows_control_characters() {
        assert_eq!(escaped("web-1 ünïcode"), "web-1 ünïcode");
        assert_eq!(
            escaped("a\n\u{1b}[32mtest result: ok\r"),
            "a\\u{a}\\u{1b}[32mtest result: ok\\u{d}"
        );
        let long = "x".repeat(10_000);
        assert_eq!(escaped(&long), long);
    }

    #[test]
    fn a_broken_pipe_stops_the_output_without_an_error() {
        let mut out = Output::new(Failing {
            room: 3,
            kind: io::ErrorKind::BrokenPipe,
            written: Vec::new(),
        });
        writeln!(out, "first line").expect("absorbed");
        writeln!(out, "second line").expect("absorbed");
        out.flush().expect("absorbed");
        assert!(out.is_closed());
        assert_eq!(out.inner.written, b"fir");
    }

    #[test]
    fn other_write_errors_are_returned() {
        let mut out = Output::new(Failing {
            room: 0,
            kind: io::ErrorKind::StorageFull,
            written: Vec::new(),
        });
        let error = writeln!(out, "line").expect_err("a full disk is an error");
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert!(!out.is_closed());
    }
}
