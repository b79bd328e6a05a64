//! The parts of a review's objects that the rules of one mode can read, so
//! that the decoder builds only those (`review::ObjectParse::Projected`).
//!
//! Building a `serde_json::Value` (a map node and a `String` per key, an
//! allocation per string) is most of what a review costs: a Pod's
//! tolerations, its status and most of its spec are parsed, copied and
//! dropped although no bundled mutating rule looks at them. A projection
//! is a tree of the member names the rules' paths walk, each path ending in
//! a part kept whole; the rest of the object is skipped as the text is read.
//!
//! It is always a superset of what is read: a path the tree cannot follow
//! exactly (a filter, a slice, a `..`) keeps everything below its last
//! plain step, an index keeps every element, and a path that names a whole
//! document keeps it whole. A `forEach` whose path the tree can follow
//! keeps every element (their number decides how often its checks or edits
//! run) with what those read below each; a `forEach` over entries, one
//! that a bound name is read through, or one the tree cannot follow keeps
//! its elements whole.

use std::collections::BTreeMap;

use super::path::{JsonPath, Root, Step};
use super::{POD_SPEC_PLACES, pod_spec_location_at, pod_spec_place};
use crate::patch::Token;

/// How deep a projection follows member names; below it, everything is
/// kept whole. Paths are bounded by the rule file only, and the tree is
/// built and merged recursively.
pub const MAX_PROJECTION_DEPTH: usize = 32;

/// What of a JSON value the rules can read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Projection {
    /// Nothing below it: a map is kept without members, a list's elements
    /// as nulls (its length kept), a scalar as it is.
    #[default]
    Nothing,
    /// All of it.
    Whole,
    /// Some members, or elements.
    Part(Part),
}

/// The members of a map, or the elements of a list, that are read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    /// By member name (each already holding what `any` holds).
    keys: BTreeMap<Box<str>, Projection>,
    /// Bit `n` set when a name in `keys` is `n` bytes long (bit 63: 63 or
    /// more). Most members of an object are not read, and most of those
    /// differ in length from every name read: they are passed over without
    /// comparing text.
    lengths: u64,
    /// For every member or element (a wildcard or an index).
    any: Option<Box<Projection>>,
}

impl Projection {
    /// True when all of the value is kept.
    pub fn is_whole(&self) -> bool {
        matches!(self, Projection::Whole)
    }

    /// What is read below the member `key` of a map; `None` for nothing.
    pub fn member(&self, key: &str) -> Option<&Projection> {
        match self {
            Projection::Nothing => None,
            Projection::Whole => Some(&Projection::Whole),
            Projection::Part(part) => part.named(key).or(part.any.as_deref()),
        }
    }

    /// What is read below each element of a list.
    pub fn element(&self) -> &Projection {
        match self {
            Projection::Nothing => &Projection::Nothing,
            Projection::Whole => &Projection::Whole,
            Projection::Part(part) => part.any.as_deref().unwrap_or(&Projection::Nothing),
        }
    }

    /// Adds the place `steps` lead to and, with [`End::Whole`], everything
    /// below it, taking a node of `nodes` for each it makes.
    fn add(
        &mut self,
        steps: &[Step],
        end: End,
        depth: usize,
        nodes: &mut Nodes,
    ) -> Result<(), TooLarge> {
        if self.is_whole() {
            return Ok(());
        }
        let Some((first, rest)) = steps.split_first() else {
            if end == End::Whole {
                *self = Projection::Whole;
            }
            return Ok(());
        };
        if depth >= MAX_PROJECTION_DEPTH {
            *self = Projection::Whole;
            return Ok(());
        }
        if let Projection::Nothing = self {
            *self = Projection::Part(Part::default());
        }
        match self {
            Projection::Part(part) => part.add_step(first, rest, end, depth, nodes),
            _ => Ok(()),
        }
    }

    /// Everything `other` keeps, kept here too.
    fn merge(&mut self, other: &Projection, nodes: &mut Nodes) -> Result<(), TooLarge> {
        match (&mut *self, other) {
            (Projection::Whole, _) | (_, Projection::Nothing) => Ok(()),
            (_, Projection::Whole) => {
                *self = Projection::Whole;
                Ok(())
            }
            (Projection::Nothing, Projection::Part(_)) => {
                *self = Projection::Part(Part::default());
                self.merge(other, nodes)
            }
            (Projection::Part(part), Projection::Part(other)) => {
                for (key, projection) in &other.keys {
                    part.child(key, nodes)?.merge(projection, nodes)?;
                }
                if let Some(any) = &other.any {
                    part.any(nodes)?.merge(any, nodes)?;
                }
                Ok(())
            }
        }
    }

    /// Gives every named member what the wildcard beside it keeps, so that
    /// a lookup takes one or the other.
    fn settle(&mut self, nodes: &mut Nodes) -> Result<(), TooLarge> {
        let Projection::Part(part) = self else {
            return Ok(());
        };
        if let Some(any) = &part.any {
            for projection in part.keys.values_mut() {
                projection.merge(any, nodes)?;
            }
        }
        for projection in part.keys.values_mut() {
            projection.settle(nodes)?;
        }
        match &mut part.any {
            Some(any) => any.settle(nodes),
            None => Ok(()),
        }
    }
}

/// What [`Projection::add`] keeps at the place its steps lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Everything at and below it.
    Whole,
    /// The place itself: a member or element there is kept, with nothing
    /// below it ([`Projection::Nothing`]).
    Shape,
}

/// The bit of [`Part::lengths`] for a name as long as `key`.
fn length_bit(key: &str) -> u64 {
    1 << key.len().min(63)
}

/// The nodes a projection may still make: paths of many unions (each
/// option walks the rest of the path again) would otherwise make a tree
/// exponential in the path's length.
#[derive(Debug, Clone, Copy)]
struct Nodes(usize);

impl Nodes {
    fn take(&mut self) -> Result<(), TooLarge> {
        self.0 = self.0.checked_sub(1).ok_or(TooLarge)?;
        Ok(())
    }
}

/// A projection went over [`MAX_PROJECTION_NODES`]: the document is kept
/// whole instead.
#[derive(Debug)]
struct TooLarge;

impl Part {
    fn add_step(
        &mut self,
        step: &Step,
        rest: &[Step],
        end: End,
        depth: usize,
        nodes: &mut Nodes,
    ) -> Result<(), TooLarge> {
        match step {
            Step::Key(key) => self.child(key, nodes)?.add(rest, end, depth + 1, nodes),
            // Which element a negative index names depends on the list, and
            // a wildcard selects a map's members as well: either keeps what
            // follows for every member and element.
            Step::Index(_) | Step::Wildcard => self.any(nodes)?.add(rest, end, depth + 1, nodes),
            Step::Union(options) => {
                for option in options {
                    self.add_step(option, rest, end, depth, nodes)?;
                }
                Ok(())
            }
        }
    }

    /// The member `key`'s projection, made (one node) when it is new.
    fn child(&mut self, key: &str, nodes: &mut Nodes) -> Result<&mut Projection, TooLarge> {
        if !self.keys.contains_key(key) {
            nodes.take()?;
            self.lengths |= length_bit(key);
        }
        Ok(self.keys.entry(Box::from(key)).or_default())
    }

    /// The projection of the member named `key`, if that name is read.
    fn named(&self, key: &str) -> Option<&Projection> {
        if self.lengths & length_bit(key) == 0 {
            return None;
        }
        self.keys.get(key)
    }

    /// Every member's and element's projection, made when it is new.
    fn any(&mut self, nodes: &mut Nodes) -> Result<&mut Projection, TooLarge> {
        if self.any.is_none() {
            nodes.take()?;
        }
        Ok(self.any.get_or_insert_default())
    }
}

/// How many nodes the projection of one document (the object, the old
/// object) may have for one mode; past it, the document is kept whole.
pub const MAX_PROJECTION_NODES: usize = 16_384;

/// What the rules of one mode can read of a review's object and old object.
#[derive(Debug, Clone)]
pub struct ObjectProjections {
    /// Of `object`.
    pub object: Projection,
    /// Of `oldObject`.
    pub old_object: Projection,
    /// Left to each: object, old object.
    nodes: [Nodes; 2],
    /// Where `$.podSpec` and `$.oldPodSpec` are for the kinds these are
    /// for: one place, none (a kind without a pod spec), or each place
    /// (for a review whose kind is not known yet).
    pod_specs: Vec<&'static [Token]>,
}

/// The projections of one mode, by where a kind's pod spec sits: a Pod
/// reads its whole `spec` where a workload compares its pod template's.
#[derive(Debug, Clone)]
pub struct KindProjections {
    /// At each of the places ([`pod_spec_place`]), then for kinds without
    /// a pod spec, then for any kind.
    by_place: [ObjectProjections; POD_SPEC_PLACES + 2],
}

impl Default for KindProjections {
    fn default() -> Self {
        KindProjections::build(|_| {})
    }
}

impl KindProjections {
    /// Projections to which `add` adds the rules' paths, for each place.
    pub fn build(mut add: impl FnMut(&mut ObjectProjections)) -> Self {
        let every: Vec<&'static [Token]> = (0..POD_SPEC_PLACES)
            .filter_map(pod_spec_location_at)
            .collect();
        let by_place = std::array::from_fn(|place| {
            let pod_specs = match place {
                _ if place < POD_SPEC_PLACES => pod_spec_location_at(place).into_iter().collect(),
                POD_SPEC_PLACES => Vec::new(),
                _ => every.clone(),
            };
            let mut projections = ObjectProjections::names(pod_specs);
            add(&mut projections);
            projections.settle();
            projections
        });
        KindProjections { by_place }
    }

    /// For a review of `kind`; `""` (not known yet) takes the one for every
    /// kind.
    pub fn of_kind(&self, kind: &str) -> &ObjectProjections {
        let place = match pod_spec_place(kind) {
            Some(place) => place,
            None if kind.is_empty() => POD_SPEC_PLACES + 1,
            None => POD_SPEC_PLACES,
        };
        &self.by_place[place]
    }
}

impl Default for ObjectProjections {
    fn default() -> Self {
        ObjectProjections {
            object: Projection::Nothing,
            old_object: Projection::Nothing,
            nodes: [Nodes(MAX_PROJECTION_NODES); 2],
            pod_specs: Vec::new(),
        }
    }
}

impl ObjectProjections {
    /// Whether the object or the old object keeps anything at or below
    /// the member names `keys`.
    pub fn keeps(&self, keys: &[&str]) -> bool {
        [&self.object, &self.old_object]
            .into_iter()
            .any(|projection| {
                keys.iter()
                    .try_fold(projection, |projection, key| projection.member(key))
                    .is_some()
            })
    }

    /// Whether a rule's path leads to the member path `keys` of the object
    /// or the old object: by name, through a wildcard (`[*]`, a filter), or
    /// ending above it. A document kept whole from its root does not count:
    /// that is how a CEL expression reads it, naming nothing.
    pub fn names_explicitly(&self, keys: &[&str]) -> bool {
        [&self.object, &self.old_object]
            .into_iter()
            .any(|projection| {
                matches!(projection, Projection::Part(_))
                    && keys
                        .iter()
                        .try_fold(projection, |projection, key| match projection {
                            Projection::Part(part) => part.named(key).or(part.any.as_deref()),
                            Projection::Whole => Some(projection),
                            Projection::Nothing => None,
                        })
                        .is_some()
            })
    }

    /// Nothing read yet but the names a denial's record shows
    /// (`metadata.name`, `metadata.generateName`), for kinds whose pod spec
    /// is at `pod_specs`.
    fn names(pod_specs: Vec<&'static [Token]>) -> Self {
        let mut projections = ObjectProjections {
            pod_specs,
            ..ObjectProjections::default()
        };
        for key in ["name", "generateName"] {
            projections.add_both(&[Step::Key("metadata".into()), Step::Key(key.into())]);
        }
        projections
    }

    /// Adds `steps` from the root of both documents.
    pub fn add_both(&mut self, steps: &[Step]) {
        let [object_nodes, old_object_nodes] = &mut self.nodes;
        add_within(&mut self.object, steps, End::Whole, object_nodes);
        add_within(&mut self.old_object, steps, End::Whole, old_object_nodes);
    }

    /// Adds what `path`, followed by the names and indices of `tail` (a
    /// write's, below its prefix), can read. Paths from a `forEach`
    /// element or a bound name are left to their `forEach`: see
    /// [`ObjectProjections::add_path_within`].
    pub fn add_path(&mut self, path: &JsonPath, tail: &[Token]) {
        self.add_path_within(path, tail, &[], None);
    }

    /// [`ObjectProjections::add_path`], then `more` steps, with a path
    /// from a `forEach` element read below `element` (where the elements
    /// are); without one, such a path adds nothing, and its `forEach`'s
    /// path is added whole instead.
    pub fn add_path_within(
        &mut self,
        path: &JsonPath,
        tail: &[Token],
        more: &[Step],
        element: Option<&Place>,
    ) {
        match Place::of(path, tail, more, element) {
            Placed::At(place) => self.add_place(&place),
            Placed::Nowhere => {}
            Placed::BothWhole => {
                self.object = Projection::Whole;
                self.old_object = Projection::Whole;
            }
        }
    }

    /// Adds everything at and below `place`.
    pub fn add_place(&mut self, place: &Place) {
        self.add_place_to(place, End::Whole);
    }

    /// Adds the members or elements at `place` (a `forEach`'s), each with
    /// nothing below it: how many there are, not what they hold.
    pub fn add_shape(&mut self, place: &Place) {
        self.add_place_to(place, End::Shape);
    }

    fn add_place_to(&mut self, place: &Place, end: End) {
        let [object_nodes, old_object_nodes] = &mut self.nodes;
        let (target, nodes, pod_spec) = match place.root {
            Root::Object => (&mut self.object, object_nodes, false),
            Root::PodSpec => (&mut self.object, object_nodes, true),
            Root::OldObject => (&mut self.old_object, old_object_nodes, false),
            Root::OldPodSpec => (&mut self.old_object, old_object_nodes, true),
            Root::Request | Root::Element | Root::Binding(_) => return,
        };
        if !pod_spec {
            add_within(target, &place.steps, end, nodes);
            return;
        }
        for location in &self.pod_specs {
            let mut full: Vec<Step> = location.iter().map(Step::from).collect();
            full.extend(place.steps.iter().cloned());
            add_within(target, &full, end, nodes);
        }
    }

    /// Done adding: each lookup made cheap.
    pub fn settle(&mut self) {
        let documents = [&mut self.object, &mut self.old_object];
        for (projection, nodes) in documents.into_iter().zip(&mut self.nodes) {
            if projection.settle(nodes).is_err() {
                *projection = Projection::Whole;
            }
        }
    }
}

/// A place in a document that a path reads at and below: its root (a
/// document's, never an element's) and the plain steps from there.
#[derive(Debug, Clone)]
pub struct Place {
    root: Root,
    steps: Vec<Step>,
    /// Whether the steps lead exactly to what the path reads, so that
    /// steps may follow them (a `forEach` element's paths); otherwise they
    /// stop at the path's last plain step, and all below is read.
    exact: bool,
}

/// Where a path reads, as [`Place::of`] finds it.
#[derive(Debug)]
pub enum Placed {
    /// At and below this place.
    At(Place),
    /// In no document, or below a place its `forEach` adds whole.
    Nowhere,
    /// Anywhere in both documents: a filter compares with a query from a
    /// root (`[?(@.name == $.metadata.name)]`), which the steps do not show.
    BothWhole,
}

impl Place {
    /// Whether the steps lead exactly to what the path reads.
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// Where `path`, then the names and indices of `tail`, then `more`,
    /// reads; a path from a `forEach` element reads below `element`.
    pub fn of(path: &JsonPath, tail: &[Token], more: &[Step], element: Option<&Place>) -> Placed {
        let (steps, simple) = path.leading_steps();
        if !simple && path.text().get(1..).is_some_and(|t| t.contains('$')) {
            return Placed::BothWhole;
        }
        let (root, mut full) = match path.root() {
            Root::Element => match element {
                // Below an inexact place all is read already.
                Some(element) if element.exact => (element.root, element.steps.clone()),
                _ => return Placed::Nowhere,
            },
            Root::Binding(_) => return Placed::Nowhere,
            root => (root, Vec::new()),
        };
        full.extend(steps.iter().cloned());
        if simple {
            full.extend(tail.iter().map(Step::from));
            full.extend(more.iter().cloned());
        }
        Placed::At(Place {
            root,
            steps: full,
            exact: simple,
        })
    }
}

/// Adds `steps` to `projection`, which is kept whole from then on if that
/// takes more nodes than are left.
fn add_within(projection: &mut Projection, steps: &[Step], end: End, nodes: &mut Nodes) {
    if projection.add(steps, end, 0, nodes).is_err() {
        *projection = Projection::Whole;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PathScope;

    fn path(text: &str) -> JsonPath {
        JsonPath::compile(text, PathScope::DOCUMENT).unwrap()
    }

    /// The projections of `paths`, for a kind not known yet.
    fn of(paths: &[&str]) -> ObjectProjections {
        let mut projections = ObjectProjections {
            pod_specs: (0..POD_SPEC_PLACES)
                .filter_map(pod_spec_location_at)
                .collect(),
            ..ObjectProjections::default()
        };
        for text in paths {
            projections.add_path(&path(text), &[]);
        }
        projections.settle();
        projections
    }

    #[test]
    fn a_place_is_named_by_paths_leading_to_it_not_by_a_whole_document() {
        let managed = ["metadata", "managedFields"];
        let last_applied = [
            "metadata",
            "annotations",
            "kubectl.kubernetes.io/last-applied",
        ];
        for (paths, place, named) in [
            (
                &["$.object.metadata.managedFields[*].manager"][..],
                &managed[..],
                true,
            ),
            (&["$.object.metadata.annotations[*]"], &last_applied, true),
            (&["$.object.metadata.annotations[*]"], &managed, false),
            (&["$.oldObject.metadata"], &managed, true),
            (&["$.object.data.password"], &["data"], true),
            (&["$.object.data.password"], &["stringData"], false),
            // How a CEL expression reads: its whole document.
            (&["$.object"], &managed, false),
            (&["$.object.metadata.name"], &managed, false),
        ] {
            assert_eq!(
                of(paths).names_explicitly(place),
                named,
                "{paths:?} {place:?}"
            );
        }
    }

    #[test]
    fn a_path_keeps_the_members_it_walks_and_all_below_its_end() {
        let projections = of(&["$.object.metadata.labels.team"]);
        let object = &projections.object;
        let metadata = object.member("metadata").unwrap();
        assert!(object.member("spec").is_none());
        assert!(metadata.member("annotations").is_none());
        let labels = metadata.member("labels").unwrap();
        assert!(labels.member("app").is_none());
        assert!(labels.member("team").unwrap().is_whole());
        assert_eq!(projections.old_object, Projection::Nothing);
    }

    #[test]
    fn a_name_is_found_whatever_its_length_and_only_when_read() {
        // Lengths 63 and over share one bit of the length filter.
        let read: Vec<String> = [1, 5, 62, 63, 64, 80]
            .iter()
            .map(|&n| "k".repeat(n))
            .collect();
        let paths: Vec<String> = read
            .iter()
            .map(|name| format!("$.object.data['{name}']"))
            .collect();
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let projections = of(&paths);
        let data = projections.object.member("data").unwrap();
        for n in 0..100 {
            for name in ["k".repeat(n), "x".repeat(n)] {
                assert_eq!(
                    data.member(&name).is_some(),
                    read.contains(&name),
                    "{n} bytes: {name}"
                );
            }
        }
    }

    #[test]
    fn a_tree_over_the_node_bound_keeps_its_document_whole() {
        // Each union walks the rest of the path once per option: 2^30
        // nodes, stopped at the bound.
        let unions = "['a','b']".repeat(30);
        let projections = of(&[
            &format!("$.object.data{unions}"),
            "$.oldObject.metadata.name",
        ]);
        assert!(projections.object.is_whole());
        assert!(!projections.old_object.is_whole());
        // A wildcard beside names at every level, merged into each name.
        let mut paths = vec![format!("$.object{}", "[*]".repeat(20))];
        for i in 0..20 {
            paths.push(format!("$.object{}.k{i}", ".a".repeat(i)));
        }
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let projections = of(&paths);
        let mut projection = &projections.object;
        for _ in 0..5 {
            projection = projection.member("a").unwrap();
        }
        assert!(projection.member("k5").unwrap().is_whole());
    }

    #[test]
    fn wildcards_unions_and_indices_keep_every_member_and_element() {
        let projections = of(&[
            "$.object.spec['containers','initContainers'][*].image",
            "$.object.spec.volumes[0].hostPath",
            "$.object.spec.containers[*].name",
        ]);
        let spec = projections.object.member("spec").unwrap();
        for list in ["containers", "initContainers"] {
            let element = spec.member(list).unwrap().element();
            assert!(element.member("image").unwrap().is_whole(), "{list}");
            assert!(element.member("env").is_none(), "{list}");
        }
        let containers = spec.member("containers").unwrap().element();
        assert!(containers.member("name").unwrap().is_whole());
        let volumes = spec.member("volumes").unwrap().element();
        assert!(volumes.member("hostPath").unwrap().is_whole());
        assert!(volumes.member("name").is_none());
    }

    #[test]
    fn a_wildcard_beside_names_gives_each_name_what_it_keeps() {
        let projections = of(&["$.object.spec.things[*].x", "$.object.spec.things.team.y"]);
        let things = projections
            .object
            .member("spec")
            .and_then(|m| m.member("things"))
            .unwrap();
        let team = things.member("team").unwrap();
        assert!(team.member("x").unwrap().is_whole());
        assert!(team.member("y").unwrap().is_whole());
        let other = things.member("other").unwrap();
        assert!(other.member("x").unwrap().is_whole());
        assert!(other.member("y").is_none());
    }

    #[test]
    fn queries_keep_all_below_their_plain_steps_and_whole_documents_stay_whole() {
        let projections = of(&["$.object.spec.containers[?(@.name == 'a')].image"]);
        let spec = projections.object.member("spec").unwrap();
        assert!(spec.member("containers").unwrap().is_whole());
        assert!(spec.member("tolerations").is_none());
        assert!(of(&["$.object"]).object.is_whole());
        assert!(of(&["$.object..image"]).object.is_whole());
        // A filter that reads from the root may read anything.
        let anywhere = of(&["$.object.spec.containers[?(@.name == $.object.metadata.name)]"]);
        assert!(anywhere.object.is_whole() && anywhere.old_object.is_whole());
    }

    #[test]
    fn the_pod_spec_is_kept_where_the_kind_holds_it_and_old_documents_apart() {
        let projections = KindProjections::build(|projections| {
            projections.add_path(&path("$.podSpec.hostNetwork"), &[]);
            projections.add_path(&path("$.oldObject.metadata.labels"), &[]);
        });
        let at = |projection: &Projection, keys: &[&str]| {
            keys.iter()
                .try_fold(projection, |p, key| p.member(key))
                .is_some_and(Projection::is_whole)
        };
        let places: [&[&str]; 4] = [
            &["spec", "hostNetwork"],
            &["spec", "template", "spec", "hostNetwork"],
            &[
                "spec",
                "jobTemplate",
                "spec",
                "template",
                "spec",
                "hostNetwork",
            ],
            &["template", "spec", "hostNetwork"],
        ];
        for (kind, place) in [("Pod", 0), ("Job", 1), ("CronJob", 2), ("PodTemplate", 3)] {
            let object = &projections.of_kind(kind).object;
            for (i, keys) in places.iter().enumerate() {
                assert_eq!(at(object, keys), i == place, "{kind} {keys:?}");
            }
        }
        // Before the kind is known: every place.
        let unknown = &projections.of_kind("").object;
        assert!(places.iter().all(|keys| at(unknown, keys)));
        // A kind without a pod spec reads none, only the names.
        let config_map = projections.of_kind("ConfigMap");
        assert!(config_map.object.member("spec").is_none());
        assert!(at(&config_map.object, &["metadata", "name"]));
        for kind in ["Pod", "ConfigMap", ""] {
            let old = &projections.of_kind(kind).old_object;
            assert!(at(old, &["metadata", "labels"]), "{kind}");
            assert!(old.member("spec").is_none(), "{kind}");
        }
    }

    #[test]
    fn a_write_keeps_its_prefix_and_its_tail() {
        let mut projections = ObjectProjections::default();
        let (prefix, tail) = path("$.object.metadata.labels.team").split_for_write();
        projections.add_path(&prefix, &tail);
        projections.settle();
        let labels = projections
            .object
            .member("metadata")
            .and_then(|metadata| metadata.member("labels"))
            .unwrap();
        assert!(labels.member("team").unwrap().is_whole());
        assert!(labels.member("app").is_none());
    }

    #[test]
    fn the_bundled_rules_leave_out_what_they_never_read() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/rules");
        let rules = crate::rules::load_dir(std::path::Path::new(dir)).unwrap();
        let plan = crate::plan::compile(&rules).unwrap();
        for mode in [crate::plan::Mode::Mutate, crate::plan::Mode::Validate] {
            let object = &plan.projections(mode, "Pod").object;
            assert!(object.member("status").is_none(), "{mode:?}");
            let metadata = object.member("metadata").unwrap();
            assert!(metadata.member("managedFields").is_none(), "{mode:?}");
            assert!(metadata.member("ownerReferences").is_none(), "{mode:?}");
            for read in ["name", "generateName", "labels"] {
                assert!(metadata.member(read).is_some(), "{mode:?} {read}");
            }
        }
        // The mutating rules read little of a Pod's spec; the validating
        // ones compare a workload's whole pod spec with the old one's, and
        // `$.podSpec` is a Pod's `spec`.
        let spec = |mode| plan.projections(mode, "Pod").object.member("spec").cloned();
        let mutated = spec(crate::plan::Mode::Mutate).unwrap();
        for unread in ["tolerations", "schedulerName", "dnsPolicy", "nodeName"] {
            assert!(mutated.member(unread).is_none(), "{unread}");
        }
        assert_eq!(spec(crate::plan::Mode::Validate), Some(Projection::Whole));
    }

    #[test]
    fn a_path_deeper_than_the_bound_keeps_all_below_the_bound() {
        let text = format!("$.object{}", ".a".repeat(MAX_PROJECTION_DEPTH * 4));
        let projections = of(&[&text]);
        let mut projection = &projections.object;
        for _ in 0..MAX_PROJECTION_DEPTH {
            projection = projection.member("a").unwrap();
        }
        assert!(projection.is_whole());
    }
}
