#!/usr/bin/env python3
"""check-cycles.py ROOT -- fail when the source files of one folder call
each other in a circle (issue 23: no file-level circle anywhere).

Every folder under proto/, client/, ctl/, daemon/ and kernels/ (each
directory on its own: kernels/, kernels/cpu/, kernels/gpu/, ...) is a
graph: a node per source file (*.c, *.hip, *.cpp), an arrow A -> B when
A names a non-static function or object that B defines (a call, or a
function pointer taken by name: a table naming a handler depends on it
as much as a call does).  A name A defines itself (static or not) is
A's own.  Headers are not nodes: a prototype is no dependency, a use
through a header's inline function or macro is not seen (the check reads
sources, so it also covers the GPU sources no compiler here builds).

A strongly connected component of two or more files is a circle: each is
printed with the arrows inside it and the names that make them, and the
exit status is 1.  Prints "cycles: ok (N folders, M files)" otherwise.
"""
import os
import re
import sys

MODULES = ("proto", "client", "ctl", "daemon", "kernels")
SOURCES = (".c", ".hip", ".cpp")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# C and C++ words that can stand before "(" without naming a function.
KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else",
    "case", "goto", "defined", "alignof", "_Alignof", "_Static_assert",
    "static_assert", "__attribute__", "decltype", "typeof", "__typeof__",
    "operator", "template", "__launch_bounds__", "asm", "__asm__",
}


def strip(text):
    """The text without comments, string and character literals and
    preprocessor lines (their newlines kept)."""
    out, i, n = [], 0, len(text)
    bol = True
    while i < n:
        c = text[i]
        if bol and c == "#" or (bol and c in " \t" and
                                text[i:].lstrip(" \t").startswith("#")):
            # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    continue
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j) or " ")
            i = j
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append('""' if c == '"' else "0")
            i = j + 1
            bol = False
            continue
        out.append(c)
        bol = c == "\n" or (bol and c in " \t")
        i += 1
    return "".join(out)


def top_level(code):
    """Split code into (depth-0 text, [bodies]) where a body is the text
    of a brace block opened at depth 0.  extern "C" { } and namespace
    blocks are transparent (their contents are top level)."""
    top, bodies = [], []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            head = "".join(top[-80:]) if top else ""
            if re.search(r'(extern\s+""|namespace(\s+\w+)?)\s*$', head):
                i += 1
                continue
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                j += 1
            bodies.append((len("".join(top)), code[i + 1:j - 1]))
            top.append(" {} ")
            i = j
            continue
        if c == "}":  # the end of a transparent block
            i += 1
            continue
        top.append(c)
        i += 1
    return "".join(top), bodies


def definitions(code):
    """(exported, local): the names a file defines at top level, split by
    whether they are static."""
    top, _ = top_level(code)
    exported, local = set(), set()
    # Declarations end at ";" or at a body ("{}"); each is one statement.
    for stmt in re.split(r";|\{\}", top):
        words = stmt.strip()
        if not words or words.startswith("typedef"):
            continue
        is_static = re.search(r"\bstatic\b", words) is not None
        is_extern = re.match(r"\s*extern\b", words) is not None
        m = re.search(r"([A-Za-z_]\w*)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*"
                      r"(const\s*)?(__attribute__\s*\(\(.*\)\)\s*)?$",
                      words, re.S)
        names = []
        if m and m.group(1) not in KEYWORDS:
            names.append(m.group(1))  # a function (defined or declared)
        elif re.match(r"(template|using|namespace)\b", words) or \
                re.search(r"\b(struct|union|enum|class)\s+\w+\s*$", words):
            pass  # a type's definition, not an object
        elif "(" not in words.split("=")[0]:
            # objects: "int a = 1, b[4]" -> a, b
            for part in re.split(r",(?![^{(\[]*[)}\]])", words):
                lhs = part.split("=")[0]
                ids = [w for w in IDENT.findall(re.sub(r"\[.*?\]", "", lhs))]
                if len(ids) >= 2:
                    names.append(ids[-1])
        for name in names:
            if is_static:
                local.add(name)
            elif not is_extern:
                exported.add(name)
    return exported, local


def function_bodies_names(code):
    """Names with a body at top level (function definitions)."""
    top, bodies = top_level(code)
    names = set()
    for pos, _ in bodies:
        head = top[:pos]
        m = re.search(r"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(const\s*)?"
                      r"(__attribute__\s*\(\(.*\)\)\s*)?$", head, re.S)
        if m and m.group(1) not in KEYWORDS:
            names.add(m.group(1))
    return names


def scan(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        code = strip(f.read())
    exported, local = definitions(code)
    with_body = function_bodies_names(code)
    top, _ = top_level(code)
    # A function counts as defined only with a body; an object at top
    # level without "(" is a definition unless extern.
    funcs = {n for n in exported if n in with_body}
    objs = {n for n in exported if n not in with_body and
            re.search(r"\b%s\s*\(" % re.escape(n), top) is None}
    own = funcs | objs | local | with_body
    # a member (x.name, p->name) is not the global of that name
    used = set(IDENT.findall(re.sub(r"(\.|->)\s*[A-Za-z_]\w*", " ", code)))
    return funcs | objs, own, used


def folders(root):
    for mod in MODULES:
        base = os.path.join(root, mod)
        for d, subdirs, files in os.walk(base):
            subdirs.sort()
            srcs = sorted(f for f in files if f.endswith(SOURCES))
            if srcs:
                yield os.path.relpath(d, root), [os.path.join(d, f)
                                                 for f in srcs]


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def check_folder(root, folder, paths):
    info = {}
    for p in paths:
        info[os.path.basename(p)] = scan(p)
    definer = {}
    for name, (defs, _, _) in info.items():
        for d in defs:
            definer.setdefault(d, set()).add(name)
    edges, why = {}, {}
    for a, (_, own, used) in info.items():
        for sym in used - own:
            for b in definer.get(sym, ()):
                if b != a:
                    edges.setdefault(a, set()).add(b)
                    why.setdefault((a, b), set()).add(sym)
    bad = [c for c in sccs(info, edges) if len(c) > 1]
    for comp in bad:
        print("%s/: a circle of %d files: %s" % (folder, len(comp),
                                                 " ".join(comp)))
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    names = sorted(why[(a, b)])
                    more = " ..." if len(names) > 4 else ""
                    print("  %s -> %s (%s%s)" % (a, b, ", ".join(names[:4]),
                                                 more))
    return len(bad), len(info)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    nbad = nfolders = nfiles = 0
    for folder, paths in folders(root):
        b, f = check_folder(root, folder, paths)
        nbad += b
        nfolders += 1
        nfiles += f
    if nbad:
        print("cycles: %d circle(s) between the files of a folder: a file "
              "may use another of its folder only one way (pass a callback "
              "instead of calling back by name)" % nbad)
        return 1
    print("cycles: ok (%d folders, %d files)" % (nfolders, nfiles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
