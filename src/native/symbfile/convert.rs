//! Turning symbfile records into a SymCache, the lookup table every native frame is
//! symbolicated from: ranges become functions with their inlinees, return pads fill in
//! call sites that no range covers.
//!
//! A SymCache learns an inlined call's line from the caller's line record that covers
//! the inlinee, while a symbfile keeps it on the inlinee (`callLine`, `callFile`) and
//! leaves holes in the caller's line table there. So each function's lines are laid
//! out anew: its own lines outside its inlinees, the call line over each inlinee, and
//! line 0 in the holes that remain, so that no address falls through to a neighbour.

use std::collections::BTreeMap;
use std::io::Write;

use symbolic::common::{Language, Name, NameMangling};
use symbolic::debuginfo::{FileInfo, Function, LineInfo};
use symbolic::symcache::SymCacheConverter;

use super::read::{PadFrame, Records};

/// A range kept for the tree, clipped into its parent and clear of its siblings.
struct Node {
    start: u64,
    end: u64,
    range: usize,
    children: Vec<usize>,
}

/// Nests every range into the one a level up that holds its start. Ranges without a
/// parent, or that overlap a sibling before them, are cut to fit or dropped: the
/// format promises a tree, and a lookup must find one chain per address.
fn build_tree(records: &Records) -> (Vec<Node>, Vec<usize>) {
    let mut by_depth: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (index, range) in records.ranges.iter().enumerate() {
        if range.end > range.start {
            by_depth.entry(range.depth).or_default().push(index);
        }
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut roots = Vec::new();
    let mut parents: Vec<usize> = Vec::new();
    for (expected, (depth, mut indexes)) in by_depth.into_iter().enumerate() {
        if depth as usize != expected {
            // A level is missing: nothing deeper has a parent.
            break;
        }
        let ranges = &records.ranges;
        indexes.sort_by_key(|&i| (ranges[i].start, std::cmp::Reverse(ranges[i].end)));
        let mut level = Vec::new();
        for index in indexes {
            let (mut start, mut end) = (ranges[index].start, ranges[index].end);
            let parent = if depth == 0 {
                None
            } else {
                let at = parents.partition_point(|&n| nodes[n].start <= start);
                let Some(&parent) = at.checked_sub(1).and_then(|at| parents.get(at)) else {
                    continue;
                };
                end = end.min(nodes[parent].end);
                Some(parent)
            };
            let previous = match parent {
                Some(parent) => nodes[parent].children.last(),
                None => roots.last(),
            };
            if let Some(&previous) = previous {
                start = start.max(nodes[previous].end);
            }
            if start >= end {
                continue;
            }
            let id = nodes.len();
            nodes.push(Node {
                start,
                end,
                range: index,
                children: Vec::new(),
            });
            match parent {
                Some(parent) => nodes[parent].children.push(id),
                None => roots.push(id),
            }
            level.push(id);
        }
        parents = level;
    }
    (nodes, roots)
}

fn name(name: &str) -> Name<'_> {
    // Symbfiles carry names demangled already.
    Name::new(name, NameMangling::Unmangled, Language::Unknown)
}

fn line<'a>(start: u64, end: u64, file: &'a str, line: u32) -> LineInfo<'a> {
    LineInfo {
        address: start,
        size: Some(end - start),
        file: FileInfo::from_path(file.as_bytes()),
        line: u64::from(line),
    }
}

/// Appends the range's own lines over `[from, to)`; `own` holds `(address, line)`
/// starts, each line lasting until the next start or `range_end`.
fn own_lines<'a>(
    out: &mut Vec<LineInfo<'a>>,
    own: &[(u64, u32)],
    (from, to): (u64, u64),
    range_end: u64,
    file: &'a str,
) {
    let mut cursor = from;
    let first = own
        .partition_point(|&(addr, _)| addr <= from)
        .saturating_sub(1);
    for (i, &(start, number)) in own.iter().enumerate().skip(first) {
        if start >= to {
            break;
        }
        let end = own.get(i + 1).map_or(range_end, |next| next.0).min(to);
        let start = start.max(cursor);
        if start >= end {
            continue;
        }
        if start > cursor {
            out.push(line(cursor, start, file, 0));
        }
        out.push(line(start, end, file, number));
        cursor = end;
    }
    if cursor < to {
        out.push(line(cursor, to, file, 0));
    }
}

/// The function of one node, with its inlinees already built.
fn node_function<'a>(
    records: &'a Records,
    nodes: &[Node],
    id: usize,
    inlinees: Vec<Function<'a>>,
    inline: bool,
) -> Function<'a> {
    let node = &nodes[id];
    let range = &records.ranges[node.range];
    let file = range.file.map_or("", |f| records.string(f));
    let mut lines = Vec::new();
    let mut cursor = node.start;
    for &child in &node.children {
        let child = &nodes[child];
        own_lines(
            &mut lines,
            &range.lines,
            (cursor, child.start),
            node.end,
            file,
        );
        let call = &records.ranges[child.range];
        let call_file = call.call_file.map_or(file, |f| records.string(f));
        lines.push(line(child.start, child.end, call_file, call.call_line));
        cursor = child.end;
    }
    own_lines(&mut lines, &range.lines, (cursor, node.end), node.end, file);
    Function {
        address: node.start,
        size: node.end - node.start,
        name: name(records.string(range.func)),
        compilation_dir: b"",
        lines,
        inlinees,
        inline,
    }
}

/// The tree under `root` as one function with nested inlinees, built children first
/// with a stack of its own: the tree is as deep as the upload says.
fn range_function<'a>(records: &'a Records, nodes: &[Node], root: usize) -> Function<'a> {
    struct Open<'a> {
        id: usize,
        next_child: usize,
        inlinees: Vec<Function<'a>>,
    }
    let open = |id: usize| Open {
        id,
        next_child: 0,
        inlinees: Vec::with_capacity(nodes[id].children.len()),
    };
    let mut stack = vec![open(root)];
    loop {
        let top = stack.last_mut().expect("the root is popped last");
        if let Some(&child) = nodes[top.id].children.get(top.next_child) {
            top.next_child += 1;
            stack.push(open(child));
            continue;
        }
        let done = stack.pop().expect("the stack is not empty");
        let function = node_function(records, nodes, done.id, done.inlinees, !stack.is_empty());
        match stack.last_mut() {
            Some(parent) => parent.inlinees.push(function),
            None => return function,
        }
    }
}

/// One byte at the pad's address, with the chain nested as inlinees; each frame's
/// line over the byte is the call line of the frame it holds. Built from the innermost
/// frame out, without recursion.
fn pad_function<'a>(records: &'a Records, addr: u64, frames: &[PadFrame]) -> Option<Function<'a>> {
    let mut inner: Option<Function<'a>> = None;
    for (depth, frame) in frames.iter().enumerate().rev() {
        let file = frame.file.map_or("", |f| records.string(f));
        inner = Some(Function {
            address: addr,
            size: 1,
            name: name(records.string(frame.func)),
            compilation_dir: b"",
            lines: vec![line(addr, addr + 1, file, frame.line)],
            inlinees: inner.into_iter().collect(),
            inline: depth > 0,
        });
    }
    inner
}

/// Writes the SymCache of `records`. Functions are handed to the converter one tree
/// at a time, so only the converter's own table grows with the input.
pub fn write_symcache(records: &Records, out: &mut impl Write) -> std::io::Result<()> {
    let (nodes, roots) = build_tree(records);
    let mut converter = SymCacheConverter::new();
    for &root in &roots {
        converter.process_symbolic_function(&range_function(records, &nodes, root));
    }
    let covered = |addr: u64| {
        let at = roots.partition_point(|&n| nodes[n].start <= addr);
        at.checked_sub(1)
            .is_some_and(|at| addr < nodes[roots[at]].end)
    };
    let mut pads: Vec<_> = records
        .pads
        .iter()
        .filter(|p| !p.frames.is_empty())
        .collect();
    pads.sort_by_key(|p| p.addr);
    pads.dedup_by_key(|p| p.addr);
    for pad in pads {
        if pad.addr < u64::MAX
            && !covered(pad.addr)
            && let Some(function) = pad_function(records, pad.addr, &pad.frames)
        {
            converter.process_symbolic_function(&function);
        }
    }
    converter.serialize(out)
}

#[cfg(test)]
mod tests {
    use super::super::read::{Range, ReturnPad};
    use super::*;
    use symbolic::symcache::SymCache;

    struct Built {
        records: Records,
    }

    impl Built {
        fn new() -> Self {
            Built {
                records: Records::default(),
            }
        }

        fn range(
            &mut self,
            start: u64,
            len: u64,
            depth: u32,
            func: &str,
            call_line: u32,
            lines: &[(u64, u32)],
        ) -> &mut Self {
            let func = self.records.intern(func);
            let file = Some(self.records.intern(&format!("/src/{depth}.c")));
            self.records.ranges.push(Range {
                start,
                end: start + len,
                depth,
                func,
                file,
                call_line,
                call_file: None,
                lines: lines.iter().map(|&(o, l)| (start + o, l)).collect(),
            });
            self
        }

        /// `(function, file, line)` of every frame at `addr`, innermost first.
        fn lookup(&self, addr: u64) -> Vec<(String, String, u32)> {
            let mut bytes = Vec::new();
            write_symcache(&self.records, &mut bytes).unwrap();
            let cache = SymCache::parse(&bytes).unwrap();
            cache
                .lookup(addr)
                .map(|l| {
                    (
                        l.function().name().to_owned(),
                        l.file().map(|f| f.full_path()).unwrap_or_default(),
                        l.line(),
                    )
                })
                .collect()
        }
    }

    fn frames(list: &[(&str, &str, u32)]) -> Vec<(String, String, u32)> {
        list.iter()
            .map(|&(f, p, l)| (f.to_owned(), p.to_owned(), l))
            .collect()
    }

    #[test]
    fn inline_chains_take_call_lines_from_the_inlinee() {
        let mut b = Built::new();
        b.range(0x100, 0x100, 0, "main", 0, &[(0, 10), (0x80, 20)])
            .range(0x110, 0x40, 1, "helper", 12, &[(0, 30)])
            .range(0x120, 0x8, 2, "leaf", 31, &[(0, 40)]);
        assert_eq!(b.lookup(0x104), frames(&[("main", "/src/0.c", 10)]));
        assert_eq!(
            b.lookup(0x124),
            frames(&[
                ("leaf", "/src/2.c", 40),
                ("helper", "/src/1.c", 31),
                ("main", "/src/0.c", 12)
            ])
        );
        assert_eq!(
            b.lookup(0x140),
            frames(&[("helper", "/src/1.c", 30), ("main", "/src/0.c", 12)])
        );
        assert_eq!(b.lookup(0x190), frames(&[("main", "/src/0.c", 20)]));
        assert_eq!(b.lookup(0x200), frames(&[]));
        assert_eq!(b.lookup(0xff), frames(&[]));
    }

    #[test]
    fn holes_and_orphans() {
        let mut b = Built::new();
        // No line before offset 8: the hole answers line 0, not the previous function.
        b.range(0x0, 0x10, 0, "before", 0, &[(0, 1)])
            .range(0x10, 0x20, 0, "f", 0, &[(8, 5)])
            // No depth-1 parent holds it.
            .range(0x400, 0x10, 1, "orphan", 3, &[(0, 1)])
            // Overlaps "f" at the same depth: cut to start where "f" ends.
            .range(0x20, 0x20, 0, "g", 0, &[(0, 9)]);
        assert_eq!(b.lookup(0x12), frames(&[("f", "/src/0.c", 0)]));
        assert_eq!(b.lookup(0x18), frames(&[("f", "/src/0.c", 5)]));
        assert_eq!(b.lookup(0x2f), frames(&[("f", "/src/0.c", 5)]));
        assert_eq!(b.lookup(0x30), frames(&[("g", "/src/0.c", 9)]));
        assert_eq!(b.lookup(0x404), frames(&[]));
    }

    /// The deepest chains a config may allow, ranges and a return pad, convert on a
    /// thread with half the stack of tokio's blocking pool (2 MiB), and answer every
    /// frame: symbolic's converter recurses once per level.
    #[test]
    fn the_deepest_allowed_chains_convert_on_a_blocking_threads_stack() {
        let depth = crate::config::MAX_INLINE_DEPTH;
        let mut b = Built::new();
        for level in 0..depth {
            let level = u64::from(level);
            b.range(
                0x1000 + level,
                0x1000 - 2 * level,
                level as u32,
                "f",
                7,
                &[(0, 3)],
            );
        }
        let r = &mut b.records;
        let frame = PadFrame {
            func: r.intern("pad"),
            file: None,
            line: 5,
        };
        r.pads.push(ReturnPad {
            addr: 0x4000,
            frames: vec![frame; depth as usize],
        });
        let (ranged, padded) = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || (b.lookup(0x1800), b.lookup(0x4000)))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(ranged.len(), depth as usize);
        assert_eq!(
            ranged[0],
            ("f".to_owned(), format!("/src/{}.c", depth - 1), 3)
        );
        assert_eq!(ranged[1].2, 7, "the call line of the level below");
        assert_eq!(padded.len(), depth as usize);
        assert!(padded.iter().all(|f| f.0 == "pad" && f.2 == 5));
    }

    #[test]
    fn return_pads_fill_what_ranges_do_not_cover() {
        let mut b = Built::new();
        b.range(0x100, 0x10, 0, "ranged", 0, &[(0, 3)]);
        let r = &mut b.records;
        let (outer, inner, file) = (
            r.intern("outer"),
            r.intern("inner"),
            Some(r.intern("/src/p.c")),
        );
        let chain = vec![
            PadFrame {
                func: outer,
                file,
                line: 7,
            },
            PadFrame {
                func: inner,
                file,
                line: 8,
            },
        ];
        r.pads.push(ReturnPad {
            addr: 0x104,
            frames: chain.clone(),
        });
        r.pads.push(ReturnPad {
            addr: 0x300,
            frames: chain,
        });
        assert_eq!(b.lookup(0x104), frames(&[("ranged", "/src/0.c", 3)]));
        assert_eq!(
            b.lookup(0x300),
            frames(&[("inner", "/src/p.c", 8), ("outer", "/src/p.c", 7)])
        );
        assert_eq!(b.lookup(0x301), frames(&[]));
    }
}
