//! Regexes from rule files and CEL's `matches()`: every one compiled here,
//! within bounds on its pattern's length, its compiled size, the memory
//! matching it may take, and the evaluation steps a match is charged.
//!
//! The regex crate guarantees matching in time linear in the text, but the
//! factor is the regex's size when its lazy DFA cannot serve (a cache too
//! small for the states a text visits): a 256 KiB regex scanned 300 KB in
//! 0.84 s. So a match is charged per byte of text in proportion to the size
//! the regex was compiled within ([`Pattern::match_steps`]), and the cache
//! that makes most matches fast is bounded by that same size, so that
//! the regexes of a rules directory cannot take more memory matching than
//! they were allowed compiled ([`MAX_REGEX_BYTES`]).

use std::collections::HashMap;
use std::sync::Arc;

use regex::Regex;

/// The most one regex may take compiled (regex's `size_limit`).
pub const MAX_ONE_REGEX_BYTES: usize = 256 << 10;

/// The longest regex pattern compiled, in a rule file or at run time by
/// CEL's `matches()`. The regex crate's compile time grows with the
/// pattern's length before its size bound is checked: 100 KB of `a?`
/// took 320 ms to be refused, and 4 KiB of it takes 20 ms.
pub const MAX_REGEX_PATTERN_BYTES: usize = 4 << 10;

/// The sizes a regex is tried at, smallest first: it is charged (and its
/// matches are priced by) the first it compiles within.
const SIZE_TIERS: [usize; 4] = [4 << 10, 16 << 10, 64 << 10, MAX_ONE_REGEX_BYTES];

/// The smallest lazy-DFA cache a regex is given, whatever its size. Below
/// about 16 KiB the regex crate gives up its lazy DFA even for simple
/// patterns (a registry pattern matched twice as slowly at 4 KiB); the
/// cache a regex needs grows with its compiled size (`\w+@\w+\.com`
/// compiles within 256 KiB and kept its speed with a 128 KiB cache, not
/// with 64 KiB), so a regex's cache is its size tier, at least this.
pub const MIN_MATCH_CACHE_BYTES: usize = 16 << 10;

/// The most the regexes of a rules directory may take, together: each is
/// charged the smallest of 4 KiB, 16 KiB, 64 KiB and 256 KiB it compiles
/// within, and as much again for its match cache (at least
/// [`MIN_MATCH_CACHE_BYTES`]). Each worker thread that matches a regex
/// grows a cache of its own, so a server with more than one worker adds
/// the caches' share once per further worker. Ten bytes of pattern
/// (`\w{100}`) compile to 6 MB, so a count alone would bound nothing.
pub const MAX_REGEX_BYTES: usize = 32 << 20;

/// Matching a byte of text costs an evaluation step for each this much of
/// the size a regex compiled within (see [`Pattern::match_steps`]).
const MATCH_STEP_PER_BYTE_FOR: usize = 2 << 10;

/// A regex compiled within its bounds, with the size it was compiled
/// within, which prices its matches.
///
/// Clones share the regex and its match caches. (A clone of a `Regex`
/// itself starts a pool of caches of its own: every condition that uses
/// the same pattern would grow another cache on each thread, where the
/// rules directory's bound charges one.)
#[derive(Debug, Clone)]
pub struct Pattern {
    regex: Arc<Regex>,
    /// The size tier it compiled within ([`SIZE_TIERS`]).
    size: usize,
}

impl Pattern {
    /// The pattern text.
    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    /// Whether `text` contains a match, once `charge` has taken the steps
    /// matching it costs ([`Pattern::match_steps`]); `charge`'s error when
    /// it refuses them, and then the regex does not run. The only way to
    /// match a `Pattern`, so that no caller can match uncharged.
    pub fn is_match_charged<E>(
        &self,
        text: &str,
        charge: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<bool, E> {
        charge(self.match_steps(text.len()))?;
        Ok(self.regex.is_match(text))
    }

    /// The regex itself, shared.
    #[cfg(test)]
    pub fn regex(&self) -> &Arc<Regex> {
        &self.regex
    }

    /// The size it compiled within.
    pub fn compiled_size(&self) -> usize {
        self.size
    }

    /// Whether compiling `pattern` may case-fold a large character class:
    /// true when it can turn on case-insensitive matching (a flag group
    /// holding `i`, such as `(?i)` or `(?mi:`) and holds a Unicode class
    /// (`\p`, `\P`), or a bracketed class holding anything but characters,
    /// escaped ASCII punctuation and ranges between two ASCII characters.
    ///
    /// The regex crate folds the case of a class by visiting every code point
    /// of each of its ranges that holds a cased letter: `(?i)\P{Any}` visits
    /// all 1.1 million, and took 52 ms a copy in a debug build, which the
    /// pattern's length does not price (eight bytes a copy). So a pattern
    /// compiled at run time (CEL's `matches` on request data) is refused when
    /// this holds. The test is conservative: it reads flags anywhere (even
    /// `(?-i)`), and nested or set-operation classes, Perl classes inside
    /// brackets (`[\w.]`) and escaped range ends count, so such a pattern
    /// must list its characters or match case-sensitively.
    pub(crate) fn may_fold_large_classes(pattern: &str) -> bool {
        let (mut case_insensitive, mut large) = (false, false);
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if matches!(chars.next(), Some('p' | 'P')) {
                        large = true;
                    }
                }
                '(' if chars.peek() == Some(&'?') => {
                    chars.next();
                    while let Some(&flag) = chars.peek() {
                        if !(flag.is_ascii_alphabetic() || flag == '-') {
                            break;
                        }
                        case_insensitive |= flag == 'i';
                        chars.next();
                    }
                }
                '[' => large |= !class_folds_small(&mut chars),
                _ => {}
            }
        }
        case_insensitive && large
    }

    /// The evaluation steps matching a text of `text_bytes` costs: one,
    /// and per byte one for each 2 KiB of the size the regex compiled
    /// within (2 for the smallest, 128 for the largest). Measured, release
    /// build, worst cases (a pattern whose lazy DFA never settles, on a
    /// text of random letters): a 4 KiB regex takes up to 0.35 µs a byte,
    /// a 16 KiB one 0.75 µs, a 256 KiB one 2.8 µs. Charged so, the default
    /// budget of 10,000,000 steps lets one review scan at most 5 MB with
    /// the smallest regexes and 78 KB with the largest: under 2 s of the
    /// worst matching, where a typical match of a 40-byte image name costs
    /// 81 steps.
    pub fn match_steps(&self, text_bytes: usize) -> u64 {
        let per_byte = u64::try_from(self.size / MATCH_STEP_PER_BYTE_FOR).unwrap_or(u64::MAX);
        let bytes = u64::try_from(text_bytes).unwrap_or(u64::MAX);
        1u64.saturating_add(bytes.saturating_mul(per_byte))
    }
}

/// Why one pattern did not compile within its bounds.
#[derive(Debug)]
pub(crate) enum RegexProblem {
    /// Longer than [`MAX_REGEX_PATTERN_BYTES`]: not compiled at all.
    TooLong,
    /// Over the size it was to compile within.
    TooBig,
    /// Not a regex: the last line of the regex crate's message, which
    /// names the problem (the lines above draw the pattern).
    Invalid(String),
}

/// The lazy-DFA cache a regex compiled within `size` is given.
fn match_cache_bytes(size: usize) -> usize {
    size.max(MIN_MATCH_CACHE_BYTES)
}

/// Compiles `pattern` within `size_limit` bytes, with a match cache of
/// [`match_cache_bytes`], refusing a pattern over
/// [`MAX_REGEX_PATTERN_BYTES`] before compiling it. Every regex kadmit
/// builds from rule files or requests is compiled here.
pub(crate) fn bounded_regex(pattern: &str, size_limit: usize) -> Result<Regex, RegexProblem> {
    if pattern.len() > MAX_REGEX_PATTERN_BYTES {
        return Err(RegexProblem::TooLong);
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(size_limit)
        .dfa_size_limit(match_cache_bytes(size_limit))
        .build()
        .map_err(|error| match error {
            regex::Error::CompiledTooBig(_) => RegexProblem::TooBig,
            other => {
                let detail = other.to_string();
                RegexProblem::Invalid(detail.lines().last().unwrap_or("").trim().to_owned())
            }
        })
}

/// Compiles `pattern` within the smallest size tier it fits, up to
/// `largest`; `before_attempt` is called with each tier before it is
/// tried and stops the attempts by returning false (the caller then gets
/// [`RegexProblem::TooBig`]).
pub(crate) fn tiered_pattern(
    pattern: &str,
    largest: usize,
    mut before_attempt: impl FnMut(usize) -> bool,
) -> Result<Pattern, RegexProblem> {
    let mut last = RegexProblem::TooBig;
    for size in SIZE_TIERS.into_iter().filter(|&size| size <= largest) {
        if !before_attempt(size) {
            break;
        }
        match bounded_regex(pattern, size) {
            Ok(regex) => {
                return Ok(Pattern {
                    regex: Arc::new(regex),
                    size,
                });
            }
            Err(RegexProblem::TooBig) => last = RegexProblem::TooBig,
            Err(other) => return Err(other),
        }
    }
    Err(last)
}

/// Reads a bracketed class up to its closing `]` (the `[` read): true when
/// it holds only characters, escaped ASCII punctuation and ranges between
/// two ASCII characters (whitespace around a range's `-` skipped, as
/// verbose mode does).
fn class_folds_small(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> bool {
    /// An item of the class: a character (escaped punctuation included),
    /// or anything else.
    #[derive(Clone, Copy, PartialEq)]
    enum Item {
        Char(char),
        Other,
    }
    let mut small = true;
    // The item before a `-` waiting for its other end, and the last item.
    let (mut range_start, mut last): (Option<Item>, Option<Item>) = (None, None);
    if chars.peek() == Some(&'^') {
        chars.next();
    }
    let mut first = true;
    while let Some(c) = chars.next() {
        let item = match c {
            ']' if !first => break,
            '\\' => match chars.next() {
                Some(escaped) if escaped.is_ascii_punctuation() => Item::Char(escaped),
                _ => Item::Other,
            },
            '[' => {
                // A nested class, or an ASCII class (`[:^alpha:]`): its
                // folding may be large; read to its end.
                small = false;
                let _ = class_folds_small(chars);
                Item::Other
            }
            '-' if !first && chars.peek() != Some(&']') && last.is_some() => {
                range_start = last;
                first = false;
                continue;
            }
            c if c.is_whitespace() => {
                first = false;
                continue;
            }
            c => Item::Char(c),
        };
        first = false;
        if matches!(item, Item::Other) {
            small = false;
        }
        if let Some(start) = range_start.take() {
            let ascii = |item: Item| matches!(item, Item::Char(c) if c.is_ascii());
            small &= ascii(start) && ascii(item);
        }
        last = Some(item);
    }
    small
}

/// The regexes of one compile, each compiled once, and what they are
/// charged together.
#[derive(Default)]
pub(crate) struct Regexes {
    compiled: HashMap<String, Pattern>,
    charged: usize,
}

/// Why a pattern did not compile.
pub(crate) enum RegexRefusal {
    /// Over [`MAX_ONE_REGEX_BYTES`], or (`total`) over what is left of
    /// [`MAX_REGEX_BYTES`].
    TooBig { total: bool },
    /// A pattern longer than [`MAX_REGEX_PATTERN_BYTES`].
    TooLong,
    /// Not a regex, and why.
    Invalid(String),
}

impl Regexes {
    /// `pattern` compiled, or the one compiled before from the same text.
    pub(crate) fn compile(&mut self, pattern: &str) -> Result<Pattern, RegexRefusal> {
        if let Some(compiled) = self.compiled.get(pattern) {
            return Ok(compiled.clone());
        }
        // A regex is charged its size and its match cache.
        let cost = |size: usize| size.saturating_add(match_cache_bytes(size));
        let room = MAX_REGEX_BYTES.saturating_sub(self.charged);
        if room < cost(SIZE_TIERS[0]) {
            // Nothing left to compile into: refused without compiling.
            return Err(RegexRefusal::TooBig { total: true });
        }
        let mut largest_tried = 0;
        let compiled = tiered_pattern(pattern, MAX_ONE_REGEX_BYTES, |size| {
            if cost(size) > room {
                return false;
            }
            largest_tried = size;
            true
        });
        match compiled {
            Ok(compiled) => {
                self.charged = self.charged.saturating_add(cost(compiled.size));
                self.compiled.insert(pattern.to_owned(), compiled.clone());
                Ok(compiled)
            }
            Err(RegexProblem::TooBig) => {
                // Charged as if it had compiled: a directory of patterns
                // that each fail at the largest size would otherwise
                // compile them all, each taking as long.
                self.charged = self.charged.saturating_add(cost(largest_tried));
                Err(RegexRefusal::TooBig {
                    total: largest_tried < MAX_ONE_REGEX_BYTES,
                })
            }
            Err(RegexProblem::TooLong) => Err(RegexRefusal::TooLong),
            Err(RegexProblem::Invalid(why)) => Err(RegexRefusal::Invalid(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_is_priced_by_the_size_the_regex_compiled_within() {
        let small = tiered_pattern("^registry\\.example/", MAX_ONE_REGEX_BYTES, |_| true)
            .expect("compiles");
        assert_eq!(small.compiled_size(), 4 << 10);
        assert_eq!(small.match_steps(0), 1);
        assert_eq!(small.match_steps(100), 201);
        // Unicode word classes are large: this one needs the 256 KiB tier.
        let large =
            tiered_pattern("\\w+@\\w+\\.com", MAX_ONE_REGEX_BYTES, |_| true).expect("compiles");
        assert_eq!(large.compiled_size(), 256 << 10);
        assert_eq!(large.match_steps(100), 1 + 100 * 128);
        let mut charged = 0;
        let matched = large.is_match_charged("ops@example.com", |steps| {
            charged = steps;
            Ok::<(), ()>(())
        });
        assert_eq!(matched, Ok(true));
        assert_eq!(charged, large.match_steps("ops@example.com".len()));
        // Refused steps: the regex does not run, and the refusal is given.
        assert_eq!(
            large.is_match_charged("ops@example.com", |_| Err("spent")),
            Err("spent")
        );
        assert_eq!(large.match_steps(usize::MAX), u64::MAX);
    }

    #[test]
    fn a_pattern_used_again_shares_its_regex_and_caches_and_is_charged_once() {
        let mut regexes = Regexes::default();
        let first = regexes.compile("^web-[0-9]+$").ok().expect("compiles");
        let charged = regexes.charged;
        assert_eq!(charged, (4 << 10) + MIN_MATCH_CACHE_BYTES);
        let again = regexes.compile("^web-[0-9]+$").ok().expect("compiles");
        assert!(Arc::ptr_eq(first.regex(), again.regex()));
        assert!(Arc::ptr_eq(first.regex(), first.clone().regex()));
        assert_eq!(regexes.charged, charged);
    }

    #[test]
    fn case_folding_large_classes_is_told_apart() {
        for (pattern, large) in [
            ("(?i)\\P{Any}|\\P{Any}", true),
            ("(?i)\\pL", true),
            ("(?mi:x)\\p{Greek}", true),
            ("\\pL(?-i)", true),
            ("(?i)[\\x{0}-\\x{10FFFF}]", true),
            ("(?xi)[! - \u{1E900}]", true),
            ("(?i)[é-ÿ]", true),
            ("(?i)[\\w.-]", true),
            ("(?i)[[^a]b]", true),
            ("(?i)[[:^alpha:]]", true),
            ("(?i)[a-z&&[^b]]", true),
            // Small, or not case-insensitive.
            ("\\P{Any}|\\pL", false),
            ("[\\x{0}-\\x{10FFFF}]", false),
            ("(?i)^[a-z0-9_.-]+$", false),
            ("(?i)^[^a-z]\\w+\\W\\d$", false),
            ("(?i)[]é\\-\\.]", false),
            ("(?i)[ -~]", false),
            ("(?s)\\\\p", false),
            ("(?i)\\\\p", false),
            ("(?i)é.*", false),
        ] {
            assert_eq!(Pattern::may_fold_large_classes(pattern), large, "{pattern}");
        }
    }

    #[test]
    fn the_attempts_stop_where_the_caller_says() {
        let mut tried = Vec::new();
        let refused = tiered_pattern("\\w+@\\w+\\.com", MAX_ONE_REGEX_BYTES, |size| {
            tried.push(size);
            size < (64 << 10)
        });
        assert!(matches!(refused, Err(RegexProblem::TooBig)));
        assert_eq!(tried, [4 << 10, 16 << 10, 64 << 10]);
        // A largest size below the pattern's: too big, at every tier tried.
        let refused = tiered_pattern("\\w+@\\w+\\.com", 16 << 10, |_| true);
        assert!(matches!(refused, Err(RegexProblem::TooBig)));
        // Invalid and too long stop at once.
        assert!(matches!(
            tiered_pattern("(", MAX_ONE_REGEX_BYTES, |_| true),
            Err(RegexProblem::Invalid(_))
        ));
        let long = "a".repeat(MAX_REGEX_PATTERN_BYTES + 1);
        assert!(matches!(
            tiered_pattern(&long, MAX_ONE_REGEX_BYTES, |_| true),
            Err(RegexProblem::TooLong)
        ));
    }
}
