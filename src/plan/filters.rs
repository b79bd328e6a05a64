//! What a JSONPath filter (`[?…]`) may do: its expression runs once for
//! every value the filter tests, on every review, so it may only cost what
//! that value holds.
//!
//! Three things in a filter cost more, and a path holding any of them does
//! not compile:
//!
//! - `match()` and `search()`: jsonpath-rust compiles their regex at every
//!   call, with the regex crate's default 10 MiB bound, and the pattern may
//!   be a value of the request. A 400 KB pattern tested against 20
//!   containers kept one review busy for 3 s and 200 MB.
//! - a descendant segment (`..`): each tested value walks everything below
//!   its start again.
//! - a query from the root (`$`) that may select more than one value: it
//!   walks the document again for each tested value. `[?count($..*) > 0]`
//!   over 3,000 minimal containers (a 116 KB Pod) took 7.6 s.
//!
//! A query from the tested value (`@…`) with wildcards or filters of its
//! own stays within that value, and a root query of names and indices
//! (`$.metadata.name`) is a few steps: both are allowed.

use jsonpath_rust::parser::model::{
    Comparable, Comparison, Filter, FilterAtom, FnArg, JpQuery, Segment, Selector, SingularQuery,
    Test, TestFunction,
};

/// Why a filter costs more than the value it tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `match()` or `search()`.
    Regex(&'static str),
    /// A `..` inside the filter.
    Descendant,
    /// A root query that may select several values.
    RootQuery,
}

impl Refused {
    /// The diagnostic for `path`, and how to fix it.
    pub fn explain(self, path: &str) -> (String, &'static str) {
        match self {
            Refused::Regex(name) => (
                format!(
                    "path {path:?} calls {name}() in a filter, which compiles its regex again \
                     for every value tested on every review, from a pattern that may come from \
                     the request"
                ),
                "select the values with forEach and test each with a `matches` condition, which \
                 compiles once when the rules load, or use CEL's matches() in a cel: condition",
            ),
            Refused::Descendant => (
                format!(
                    "path {path:?} has a descendant segment (..) inside a filter, which walks \
                     everything below again for every value tested"
                ),
                "name the steps inside the filter, e.g. [?@.securityContext.privileged == true]",
            ),
            Refused::RootQuery => (
                format!(
                    "path {path:?} has a query from $ inside a filter that may select several \
                     values, which walks the document again for every value tested"
                ),
                "inside a filter, read from $ only by names and indices, e.g. $.metadata.name, \
                 or read through @",
            ),
        }
    }
}

/// The first thing in `segments`' filters that costs more than the value
/// it tests; `None` when every filter stays within it.
pub fn refused(segments: &[Segment]) -> Option<Refused> {
    segments
        .iter()
        .find_map(|segment| in_segment(segment, false))
}

fn in_segment(segment: &Segment, in_filter: bool) -> Option<Refused> {
    match segment {
        Segment::Descendant(_) if in_filter => Some(Refused::Descendant),
        Segment::Descendant(inner) => in_segment(inner, in_filter),
        Segment::Selector(selector) => in_selector(selector),
        Segment::Selectors(selectors) => selectors.iter().find_map(in_selector),
    }
}

fn in_selector(selector: &Selector) -> Option<Refused> {
    match selector {
        Selector::Filter(filter) => in_filter(filter),
        Selector::Name(_) | Selector::Wildcard | Selector::Index(_) | Selector::Slice(..) => None,
    }
}

fn in_filter(filter: &Filter) -> Option<Refused> {
    match filter {
        Filter::Or(filters) | Filter::And(filters) => filters.iter().find_map(in_filter),
        Filter::Atom(atom) => match atom {
            FilterAtom::Filter { expr, .. } => in_filter(expr),
            FilterAtom::Test { expr, .. } => in_test(expr),
            FilterAtom::Comparison(comparison) => in_comparison(comparison),
        },
    }
}

/// The two sides of a comparison, whatever its operator.
pub(super) fn operands(comparison: &Comparison) -> (&Comparable, &Comparable) {
    match comparison {
        Comparison::Eq(left, right)
        | Comparison::Ne(left, right)
        | Comparison::Gt(left, right)
        | Comparison::Gte(left, right)
        | Comparison::Lt(left, right)
        | Comparison::Lte(left, right) => (left, right),
    }
}

fn in_comparison(comparison: &Comparison) -> Option<Refused> {
    let (left, right) = operands(comparison);
    in_comparable(left).or_else(|| in_comparable(right))
}

fn in_comparable(comparable: &Comparable) -> Option<Refused> {
    match comparable {
        Comparable::Function(function) => in_function(function),
        // Names and indices only, by the grammar.
        Comparable::Literal(_)
        | Comparable::SingularQuery(SingularQuery::Current(_) | SingularQuery::Root(_)) => None,
    }
}

fn in_test(test: &Test) -> Option<Refused> {
    match test {
        Test::RelQuery(segments) => segments.iter().find_map(|s| in_segment(s, true)),
        Test::AbsQuery(query) => query
            .segments
            .iter()
            .find_map(|s| in_segment(s, true))
            .or_else(|| selects_several(query).then_some(Refused::RootQuery)),
        Test::Function(function) => in_function(function),
    }
}

fn in_function(function: &TestFunction) -> Option<Refused> {
    match function {
        TestFunction::Match(..) => Some(Refused::Regex("match")),
        TestFunction::Search(..) => Some(Refused::Regex("search")),
        TestFunction::Length(argument) => in_argument(argument),
        TestFunction::Value(argument) | TestFunction::Count(argument) => in_argument(argument),
        TestFunction::Custom(_, arguments) => arguments.iter().find_map(in_argument),
    }
}

fn in_argument(argument: &FnArg) -> Option<Refused> {
    match argument {
        FnArg::Literal(_) => None,
        FnArg::Test(test) => in_test(test),
        FnArg::Filter(filter) => in_filter(filter),
    }
}

/// Whether a root query may select more than one value: anything but
/// names and single indices.
fn selects_several(query: &JpQuery) -> bool {
    !query.segments.iter().all(|segment| match segment {
        Segment::Selector(Selector::Name(_) | Selector::Index(_)) => true,
        Segment::Selectors(selectors) => {
            matches!(
                selectors.as_slice(),
                [Selector::Name(_) | Selector::Index(_)]
            )
        }
        Segment::Selector(_) | Segment::Descendant(_) => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonpath_rust::parser::parse_json_path;

    fn verdict(path: &str) -> Option<Refused> {
        let query = parse_json_path(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        refused(&query.segments)
    }

    #[test]
    fn filters_that_stay_within_the_tested_value_are_allowed() {
        for path in [
            "$.spec.containers[?@.securityContext.privileged == true]",
            "$.spec.containers[?@.name == $.metadata.name]",
            "$.spec.containers[?@.name == $.metadata.labels['app']]",
            "$.spec.containers[?@.env[?@.name == 'X']]",
            "$.spec.containers[?count(@.ports[*]) > 2]",
            "$.spec.containers[?length(@.name) > 63]",
            "$.spec.containers[?@.name == value($.metadata.name)]",
            "$.spec.containers[?$.metadata.labels.team]",
            "$.spec.containers[?$.spec.containers[0].name]",
            "$..image",
            "$.spec.containers[1:3]",
            "$.spec..containers[?@.image == 'x']",
        ] {
            assert_eq!(verdict(path), None, "{path}");
        }
    }

    #[test]
    fn filters_that_cost_more_than_the_tested_value_are_refused() {
        for (path, expected) in [
            (
                "$.spec.containers[?match(@.name, 'a.*')]",
                Refused::Regex("match"),
            ),
            (
                "$.spec.containers[?search(@.image, $.metadata.annotations.p)]",
                Refused::Regex("search"),
            ),
            (
                "$.spec.containers[?!match(@.name, 'a')]",
                Refused::Regex("match"),
            ),
            (
                "$.spec.containers[?@.name == 'a' || search(@.image, 'b')]",
                Refused::Regex("search"),
            ),
            (
                "$.spec.containers[?@.env[?match(@.value, 'x')]]",
                Refused::Regex("match"),
            ),
            ("$.spec.containers[?count($..*) > 0]", Refused::Descendant),
            ("$.spec.containers[?@..image]", Refused::Descendant),
            ("$.spec.containers[?$..name]", Refused::Descendant),
            (
                "$.spec.containers[?count($.spec.containers[*]) > 1]",
                Refused::RootQuery,
            ),
            (
                "$.spec.containers[?$.spec.containers[?@.name]]",
                Refused::RootQuery,
            ),
            ("$.spec.containers[?$.spec['a','b']]", Refused::RootQuery),
            ("$..[?count(@..*) > 0]", Refused::Descendant),
        ] {
            assert_eq!(verdict(path), Some(expected), "{path}");
        }
    }
}
