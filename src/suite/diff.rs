//! A compact unified diff of an expectation and what happened, for the
//! report of a failed case.

use std::time::Duration;

use similar::TextDiff;

/// Most lines of one diff printed; the rest are counted.
pub const MAX_DIFF_LINES: usize = 200;

/// How long the diff algorithm may look for the smallest diff of two large
/// objects before it settles for a larger one (still a correct diff).
const DIFF_TIMEOUT: Duration = Duration::from_millis(500);

/// The unified diff (three lines of context) turning `expected` into
/// `actual`, with `--- expected` / `+++ actual` headers, cut after
/// [`MAX_DIFF_LINES`] lines; empty when the two are equal.
pub fn unified(expected: &str, actual: &str) -> String {
    if expected == actual {
        return String::new();
    }
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(expected, actual);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string();
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= MAX_DIFF_LINES {
        return text;
    }
    let mut cut = lines[..MAX_DIFF_LINES].join("\n");
    cut.push_str(&format!(
        "\n… {} more lines of diff\n",
        lines.len() - MAX_DIFF_LINES
    ));
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_is_shown_with_its_context() {
        let expected = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let actual = "a\nb\nc\nd\nE\nf\ng\nh\n";
        assert_eq!(
            unified(expected, actual),
            "--- expected\n+++ actual\n@@ -2,7 +2,7 @@\n b\n c\n d\n-e\n+E\n f\n g\n h\n"
        );
        assert_eq!(unified("same\n", "same\n"), "");
    }

    #[test]
    fn long_diffs_are_cut() {
        let expected: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let printed = unified(&expected, "");
        assert_eq!(printed.lines().count(), MAX_DIFF_LINES + 1);
        assert!(printed.ends_with("… 803 more lines of diff\n"), "{printed}");
    }
}
