//! JUnit XML, the test report format CI systems read (GitLab, Jenkins,
//! GitHub Actions' test reporters): `kadmit verify --junit FILE`.
//!
//! The dialect is the common subset: `testsuites` > `testsuite` (one per
//! suite file) > `testcase`, a failed case holding a `failure` and a suite
//! that could not be used one `testcase` holding an `error`. Written by
//! hand: the format is a dozen elements, and a text's escaping is the only
//! subtle part.

use std::fmt::Write as _;
use std::time::Duration;

/// One suite's results.
#[derive(Debug, Clone)]
pub struct TestSuite {
    /// The suite's name.
    pub name: String,
    /// The suite file.
    pub file: String,
    /// Its cases that ran.
    pub cases: Vec<TestCase>,
    /// Why the suite could not be used, when it could not.
    pub error: Option<String>,
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct TestCase {
    /// The case's name.
    pub name: String,
    /// Line of the case in the suite file.
    pub line: usize,
    /// How long it took.
    pub duration: Duration,
    /// The first line of the failure and the whole report, when it failed.
    pub failure: Option<(String, String)>,
}

/// The JUnit XML document of `suites`.
pub fn render(suites: &[TestSuite], duration: Duration) -> String {
    let count = |f: &dyn Fn(&TestSuite) -> usize| suites.iter().map(f).sum::<usize>();
    let tests = count(&|suite| suite.cases.len() + usize::from(suite.error.is_some()));
    let failures = count(&failures_of);
    let errors = count(&|suite| usize::from(suite.error.is_some()));
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"kadmit verify\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{}\">",
        seconds(duration)
    );
    for suite in suites {
        let time: Duration = suite.cases.iter().map(|case| case.duration).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" file=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">",
            escape_attribute(&suite.name),
            escape_attribute(&suite.file),
            suite.cases.len() + usize::from(suite.error.is_some()),
            failures_of(suite),
            usize::from(suite.error.is_some()),
            seconds(time)
        );
        if let Some(error) = &suite.error {
            let _ = writeln!(
                xml,
                "    <testcase name=\"(suite)\" classname=\"{}\" file=\"{}\" time=\"0\">\n      <error message=\"the suite could not be used\">{}</error>\n    </testcase>",
                escape_attribute(&suite.name),
                escape_attribute(&suite.file),
                escape(error)
            );
        }
        for case in &suite.cases {
            let _ = write!(
                xml,
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\" time=\"{}\"",
                escape_attribute(&case.name),
                escape_attribute(&suite.name),
                escape_attribute(&suite.file),
                case.line,
                seconds(case.duration)
            );
            match &case.failure {
                None => xml.push_str("/>\n"),
                Some((message, report)) => {
                    let _ = writeln!(
                        xml,
                        ">\n      <failure message=\"{}\" type=\"expectation\">{}</failure>\n    </testcase>",
                        escape_attribute(message),
                        escape(report)
                    );
                }
            }
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

fn failures_of(suite: &TestSuite) -> usize {
    suite
        .cases
        .iter()
        .filter(|case| case.failure.is_some())
        .count()
}

fn seconds(duration: Duration) -> String {
    format!("{:.6}", duration.as_secs_f64())
}

/// `text` as XML character data or an attribute value: the five markup
/// characters as entities, and the characters XML 1.0 cannot hold at all
/// (controls other than tab, newline and carriage return; the two
/// non-characters U+FFFE and U+FFFF) as U+FFFD.
pub fn escape(text: &str) -> String {
    escape_as(text, false)
}

/// Like [`escape`], for an attribute value: newlines and tabs as character
/// references, since a parser reads them back as spaces otherwise.
pub fn escape_attribute(text: &str) -> String {
    escape_as(text, true)
}

fn escape_as(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // A parser turns a literal carriage return into a newline.
            '\r' => out.push_str("&#13;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(c),
            '\u{0}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_forbidden_characters_are_escaped() {
        assert_eq!(
            escape("a<b> & \"c\" 'd'\n\u{1b}[31m\u{0}\r"),
            "a&lt;b&gt; &amp; &quot;c&quot; &apos;d&apos;\n\u{fffd}[31m\u{fffd}&#13;"
        );
        assert_eq!(escape_attribute("a\n\tb"), "a&#10;&#9;b");
    }

    #[test]
    fn a_report_counts_failures_and_errors() {
        let suites = [
            TestSuite {
                name: "images".to_owned(),
                file: "t/images.suite.yaml".to_owned(),
                cases: vec![
                    TestCase {
                        name: "ok".to_owned(),
                        line: 5,
                        duration: Duration::from_millis(2),
                        failure: None,
                    },
                    TestCase {
                        name: "bad".to_owned(),
                        line: 9,
                        duration: Duration::from_millis(1),
                        failure: Some(("denies differ".to_owned(), "-a\n+b".to_owned())),
                    },
                ],
                error: None,
            },
            TestSuite {
                name: "broken".to_owned(),
                file: "t/broken.suite.yaml".to_owned(),
                cases: Vec::new(),
                error: Some("t/broken.suite.yaml:1:1: file is empty".to_owned()),
            },
        ];
        let xml = render(&suites, Duration::from_millis(5));
        assert!(
            xml.contains("<testsuites name=\"kadmit verify\" tests=\"3\" failures=\"1\" errors=\"1\" time=\"0.005000\">"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<failure message=\"denies differ\" type=\"expectation\">-a\n+b</failure>"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<error message=\"the suite could not be used\">"),
            "{xml}"
        );
    }
}
