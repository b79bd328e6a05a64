//! Colour for a person at a terminal, plain stable text for everyone else:
//! `--color auto|always|never`, as cargo and ripgrep have it.
//!
//! `auto` (the default) colours a stream only when it is a terminal whose
//! `TERM` is not `dumb`, and honours two conventions: `NO_COLOR` (any
//! non-empty value: no colour, <https://no-color.org>) and `CLICOLOR_FORCE`
//! (any value but `0`: colour even into a pipe, e.g. `| less -R`).
//! `NO_COLOR` wins over `CLICOLOR_FORCE`, and an explicit `--color always`
//! or `never` wins over both, so a command line always means what it says.
//!
//! Colour only ever wraps text that is printed anyway: with the escape codes
//! removed, coloured output is byte for byte the plain output (the golden
//! files and `tests/cli.rs` check that), so nothing a script reads changes.

use std::fmt;

use clap::ValueEnum;

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ColorChoice {
    /// When the stream is a terminal, unless `NO_COLOR` says otherwise
    /// (or `CLICOLOR_FORCE` asks for colour anyway).
    #[default]
    Auto,
    /// Always, even into a pipe or a file.
    Always,
    /// Never.
    Never,
}

impl ColorChoice {
    /// Whether a stream gets colour, given whether it is a terminal, from
    /// the process environment.
    pub fn enabled(self, is_terminal: bool) -> bool {
        self.enabled_with(is_terminal, |name| std::env::var_os(name))
    }

    /// [`ColorChoice::enabled`] with the environment given as a function,
    /// so that it can be tested without touching the process's.
    fn enabled_with(
        self,
        is_terminal: bool,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                if env("NO_COLOR").is_some_and(|value| !value.is_empty()) {
                    false
                } else if env("CLICOLOR_FORCE").is_some_and(|value| value != "0") {
                    true
                } else {
                    is_terminal && env("TERM").is_none_or(|term| term != "dumb")
                }
            }
        }
    }
}

/// The styles the subcommands use, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paint {
    enabled: bool,
}

/// One piece of text in one style; displays with the escape codes around it
/// when painting is on, as the bare text otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Painted<T> {
    text: T,
    start: &'static str,
    enabled: bool,
}

impl<T: fmt::Display> fmt::Display for Painted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.enabled {
            write!(f, "{}{}{RESET}", self.start, self.text)
        } else {
            self.text.fmt(f)
        }
    }
}

const RESET: &str = "\x1b[0m";

impl Paint {
    /// Painting on or off.
    pub fn new(enabled: bool) -> Self {
        Paint { enabled }
    }

    /// For stdout under `choice`.
    pub fn stdout(choice: ColorChoice) -> Self {
        use std::io::IsTerminal as _;
        Paint::new(choice.enabled(std::io::stdout().is_terminal()))
    }

    /// For stderr under `choice`.
    pub fn stderr(choice: ColorChoice) -> Self {
        use std::io::IsTerminal as _;
        Paint::new(choice.enabled(std::io::stderr().is_terminal()))
    }

    /// Whether escape codes are written.
    pub fn is_enabled(self) -> bool {
        self.enabled
    }

    fn style<T: fmt::Display>(self, start: &'static str, text: T) -> Painted<T> {
        Painted {
            text,
            start,
            enabled: self.enabled,
        }
    }

    /// Where something is (a file position, a heading).
    pub fn bold<T: fmt::Display>(self, text: T) -> Painted<T> {
        self.style("\x1b[1m", text)
    }

    /// A failure: a denial, an error, a problem.
    pub fn error<T: fmt::Display>(self, text: T) -> Painted<T> {
        self.style("\x1b[1;31m", text)
    }

    /// A warning.
    pub fn warning<T: fmt::Display>(self, text: T) -> Painted<T> {
        self.style("\x1b[1;33m", text)
    }

    /// A success.
    pub fn success<T: fmt::Display>(self, text: T) -> Painted<T> {
        self.style("\x1b[1;32m", text)
    }

    /// A secondary remark: a hint, an annotation.
    pub fn note<T: fmt::Display>(self, text: T) -> Painted<T> {
        self.style("\x1b[36m", text)
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn auto_follows_the_terminal_and_the_conventions() {
        use ColorChoice::*;
        // (choice, stream is a terminal, environment, colour expected)
        type Case = (
            ColorChoice,
            bool,
            &'static [(&'static str, &'static str)],
            bool,
        );
        let cases: [Case; 12] = [
            (Auto, true, &[], true),
            (Auto, false, &[], false),
            (Auto, true, &[("TERM", "dumb")], false),
            (Auto, true, &[("NO_COLOR", "1")], false),
            // An empty NO_COLOR is unset, as no-color.org says.
            (Auto, true, &[("NO_COLOR", "")], true),
            (Auto, false, &[("CLICOLOR_FORCE", "1")], true),
            (Auto, false, &[("CLICOLOR_FORCE", "0")], false),
            (
                Auto,
                false,
                &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
                false,
            ),
            (Always, false, &[("NO_COLOR", "1")], true),
            (Always, true, &[], true),
            (Never, true, &[("CLICOLOR_FORCE", "1")], false),
            (Never, true, &[], false),
        ];
        for (choice, terminal, vars, expected) in cases {
            assert_eq!(
                choice.enabled_with(terminal, env(vars)),
                expected,
                "{choice:?} terminal={terminal} {vars:?}"
            );
        }
    }

    #[test]
    fn painted_text_without_its_codes_is_the_plain_text() {
        let on = Paint::new(true);
        let off = Paint::new(false);
        let painted = format!(
            "{} {} {}",
            on.bold("a:1:2:"),
            on.error("bad"),
            on.note("(hint)")
        );
        let plain = format!(
            "{} {} {}",
            off.bold("a:1:2:"),
            off.error("bad"),
            off.note("(hint)")
        );
        assert_eq!(plain, "a:1:2: bad (hint)");
        assert!(painted.contains("\x1b[1;31mbad\x1b[0m"), "{painted:?}");
        assert_eq!(strip(&painted), plain);
    }

    /// The text without its `ESC [ ... m` sequences.
    pub(crate) fn strip(text: &str) -> String {
        let mut out = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }
}
