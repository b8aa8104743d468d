"""A CUDA variant file's two sides, told apart from the text alone: no markers to write.

Each function definition in the file and the headers it reaches by quoted #include is classed by
its execution space (__global__, __device__, both, or host). Two views of each file follow, every
line where it was (a compiler's file:line is the real file's): the host view (device bodies
emptied, each kernel's body a launch of itself, each `k<<<...>>>(args)` a call through wb_route:
wb_nvrtc_route.h), whose tokens are the host key; and the device view for NVRTC (host functions
and the statements that name them blanked; an unannotated constexpr function kept as __host__
__device__, as nvcc's relaxed constexpr allows). The scanner knows C++ well enough for the kernel
tree: comments, strings and directives are skipped, a brace after `)` opens a function body, one
after `=` an initializer, any other a scope it descends into; macros that expand to execution
spaces (WB_HD) are read from #define lines.
"""
from __future__ import annotations

import functools
import hashlib
import pathlib
import re
from dataclasses import dataclass

from .piece import include_closure, tokens

_SPACE_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]*__(?:host|device|global)__[^\n]*)$", re.M)
_FUNCTION_HEAD = re.compile(r"\)\s*(?:const\b|noexcept\b(?:\s*\([^)]*\))?|override\b|final\b|mutable\b|\s)*"
                            r"(?:->\s*[\w:<>,\s*&]+)?$")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_TEMPLATE_CLAUSE = re.compile(r"^\s*template\s*<.*?>\s*(?=(?:namespace|struct|class|union|enum)\b)", re.S)


@dataclass(frozen=True)
class Function:
    """One function definition: where its declaration starts, its body's braces, its space, its name."""
    head_start: int
    body_open: int
    body_close: int     # index of the closing brace
    space: str          # "global", "device", "both", "host" or "constexpr" (unannotated)
    name: str


# What code_only blanks: a directive (its leading whitespace kept), a comment, a literal's inside.
_NOT_CODE = re.compile(r"^[ \t]*(#(?:\\.|[^\n])*)|//[^\n]*|/\*.*?(?:\*/|\Z)|([\"'])((?:\\.|(?!\2)[^\\\n])*)(\2?)",
                       re.M | re.S)


@functools.lru_cache(maxsize=256)  # an edit re-reads every header of the closure: each text is scanned once
def code_only(text: str) -> str:
    """The text with comments, string and character literals and preprocessor lines blanked
    (newlines kept, so every offset and line number is the original's)."""
    def blank(m: re.Match) -> str:
        if m.group(1) is not None:
            return m.group(0)[:m.start(1) - m.start()] + _spaces(m.group(1))
        if m.group(2):
            return m.group(2) + _spaces(m.group(3)) + m.group(4)
        return _spaces(m.group(0))

    return _NOT_CODE.sub(blank, text)


def _spaces(text: str) -> str:
    return re.sub(r"[^\n]", " ", text)


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, min(end, len(chars))):
        if chars[k] != "\n":
            chars[k] = " "


_KEPT_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif|define|undef|include|pragma[ \t]+once)\b.*(?:\\\n.*)*",
                             re.M)


def _keep_directives(text: str, out: list[str]) -> str:
    """The blanked text with its conditional, #define, #include and #pragma once lines put back."""
    for m in _KEPT_DIRECTIVE.finditer(text):
        out[m.start():m.end()] = text[m.start():m.end()]
    return "".join(out)


def space_macros(texts) -> dict[str, str]:
    """{macro: its replacement} for #defines that expand to execution-space keywords."""
    return {name: body for text in texts for name, body in _SPACE_MACRO.findall(text)}


def functions(text: str, macros: dict[str, str] | None = None) -> list[Function]:
    """Every function definition outside function bodies, in order."""
    return [item for item in _items(text, frozenset((macros or {}).items())) if isinstance(item, Function)]


@functools.lru_cache(maxsize=256)
def _items(text: str, macros: frozenset) -> tuple:
    """_walk's items of a text, kept per (text, macros): unchanged headers are walked once."""
    return tuple(_walk(code_only(text), dict(macros)))


def _walk(code: str, macros: dict[str, str]):
    """Function definitions (Function) and the other statements outside function bodies
    ((start, end) spans, each ending with its ';'), in order."""
    depth_start = [0]     # where the current statement began, per scope level
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == ";":
            yield depth_start[-1], i + 1
            depth_start[-1] = i + 1
        elif c == "}":
            if len(depth_start) > 1:
                depth_start.pop()
            depth_start[-1] = i + 1
        elif c == "{":
            head = code[depth_start[-1]:i]
            close = matching(code, i)
            stripped = _TEMPLATE_CLAUSE.sub("", head, count=1).rstrip()  # its defaults are no initializer
            if (_FUNCTION_HEAD.search(stripped) and "(" in stripped
                    and not re.match(r"\s*(?:namespace|struct|class|union|enum)\b", stripped)):
                yield Function(depth_start[-1], i, close, _space(head, macros), _name(head))
                i = close
                depth_start[-1] = close + 1
            elif stripped.endswith(("=", "return", ",", "(")) or not stripped or re.search(r"\w\s*$", stripped) and "(" not in stripped and "=" in stripped:
                i = close  # an initializer (or a braced list): part of the statement
            else:
                depth_start.append(i + 1)  # namespace, class, extern "C": go in
        i += 1


_PAIRS = {"{": "}", "(": ")", "[": "]", "<": ">", "}": "{", ")": "(", "]": "[", ">": "<"}


def matching(code: str, at: int) -> int:
    """Where the bracket at code[at] is matched: an opening one forward, a closing one backward."""
    step, depth = (1 if code[at] in "{([<" else -1), 0
    for k in range(at, len(code) if step > 0 else -1, step):
        depth += (code[k] == code[at]) - (code[k] == _PAIRS[code[at]])
        if depth == 0:
            return k
    return len(code) - 1 if step > 0 else 0


def _space(head: str, macros: dict[str, str]) -> str:
    words = set()
    for word in _IDENT.findall(head):
        words.add(word)
        words.update(_IDENT.findall(macros.get(word, "")))
    if "__global__" in words:
        return "global"
    if "__device__" in words and "__host__" not in words:
        return "device"
    if "__device__" in words:
        return "both"
    # An unannotated constexpr function: nvcc lets device code call it (relaxed constexpr), so the
    # device view keeps it, annotated for NVRTC.
    return "constexpr" if "constexpr" in words else "host"


def _name(head: str) -> str:
    """The declared name: the identifier before the parameter list's opening parenthesis."""
    depth = 0
    for k in range(len(head) - 1, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                before = _IDENT.findall(head[:k])
                if before and before[-1] not in ("__launch_bounds__", "noexcept"):
                    return before[-1]
    return ""


def host_view(text: str, macros: dict[str, str]) -> str:
    """Device bodies emptied, each kernel's body a launch of itself, each `k<<<config>>>(args)` the
    call `(wb_route::configure(config), k(args))`: it deduces template arguments as a launch does."""
    out, code = list(text), list(code_only(text))
    fns = functions(text, macros)
    for f in fns:
        if f.space in ("global", "device"):
            _blank(out, f.body_open + 1, f.body_close)
            _blank(code, f.body_open + 1, f.body_close)
    text, code = _keep_directives(text, out), "".join(code)
    edits = [e for f in fns if f.space == "global" for e in _stub(code, f)] + _launch_calls(text, code)
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _stub(code: str, f: Function) -> list[tuple[int, int, str]]:
    """The edits that make a kernel's emptied body `wb_here: wb_route::launch_here(&&wb_here, <params>);`
    (unnamed parameters named): the label's address tells, by the symbol table, which kernel it is."""
    close = code.rindex(")", f.head_start, f.body_open)
    edits, names = [], []
    for k, (end, name, pack) in enumerate(_parameters(code, matching(code, close), close)):
        if name is None:
            name = f"wb_p{k}"
            edits.append((end, end, f" {name}"))
        names.append(name + ("..." if pack else ""))
    call = f" wb_here: wb_route::launch_here(&&wb_here{''.join(', ' + n for n in names)}); "
    return edits + [(f.body_open + 1, f.body_open + 1, call)]


_NOT_A_NAME = {"const", "volatile", "__restrict__", "__restrict", "signed", "unsigned", "char", "short", "int",
               "long", "float", "double", "bool", "void", "auto"}


def _parameters(code: str, open_: int, close: int) -> list[tuple[int, str | None, bool]]:
    """(where its declarator ends, its name or None, whether a pack) for each parameter between the
    parentheses at open_ and close."""
    found, depth, at = [], 0, open_ + 1
    for k in range(open_ + 1, close + 1):
        c = code[k]
        depth += (c in "(<[{") - (c in ")>]}")
        if (c == "," and depth == 0) or k == close:
            decl = code[at:k].split("=")[0]  # a default argument left out
            words = re.findall(r"[A-Za-z_]\w*|\.\.\.|[^\sA-Za-z_]", decl)
            if words and words != ["void"]:
                last = decl.rstrip()
                named = re.search(r"([A-Za-z_]\w*)$", last) and len(words) > 1 and words[-1] not in _NOT_A_NAME
                found.append((at + len(last), words[-1] if named else None, "..." in words))
            at = k + 1
    return found


_STARTS_NO_KERNEL = {"return", "else", "do", "case", "throw", "co_return"}


def _launch_calls(text: str, code: str) -> list[tuple[int, int, str]]:
    """The edits that write each `kernel<<<config>>>(args)` outside comments and strings as
    `(wb_route::configure(config), kernel(args))`, every line break kept."""
    edits = []
    for m in re.finditer(r"<<<(.*?)>>>\s*\(", code, re.S):
        start, close = _kernel_start(code, m.start()), matching(code, m.end() - 1)
        config = text[m.start(1):m.end(1)]
        kept = "\n" * config.count("\n")
        edits.append((start, close + 1, f"(wb_route::configure({' '.join(config.split())}), "
                                        f"{text[start:m.start()]}{text[m.end() - 1:close + 1]}){kept}"))
    return edits


def _kernel_start(code: str, at: int) -> int:
    """Where the kernel named before `<<<` begins: names joined by ::, . or ->, each followed by its
    <...>, (...) or [...] (kernel<T, 4>, ns::k, table[i], (*fn))."""
    i = at
    while True:
        j = i
        while j and code[j - 1].isspace():
            j -= 1
        if j and code[j - 1] in ">)]":
            i = matching(code, j - 1)
            continue
        k = j
        while k and (code[k - 1].isalnum() or code[k - 1] == "_"):
            k -= 1
        if k == j or code[k:j] in _STARTS_NO_KERNEL:
            return i
        i = j = k
        while j and code[j - 1].isspace():
            j -= 1
        if code[j - 2:j] not in ("::", "->") and code[j - 1:j] != ".":
            return i
        i = j - (1 if code[j - 1] == "." else 2)


def host_names(texts, macros: dict[str, str]) -> set[str]:
    """The functions the device view leaves out: host ones, and constexpr ones that name one."""
    fns = [(f, code) for text in texts for code in [code_only(text)] for f in functions(text, macros)]
    names = {f.name for f, _ in fns if f.space == "host" and f.name}
    grown = True
    while grown:
        before = len(names)
        names |= {f.name for f, code in fns if f.space == "constexpr" and f.name
                  and set(_IDENT.findall(code[f.body_open:f.body_close])) & names}
        grown = len(names) > before
    return names


def device_view(text: str, macros: dict[str, str], hosts: set[str] | None = None) -> str:
    """Host function definitions blanked, and the statements outside functions that declare one or
    name one (hosts: those of the other files of the closure too)."""
    code = code_only(text)
    out = list(text)
    items = _items(text, frozenset(macros.items()))
    host_names = {f.name for f in items if isinstance(f, Function) and f.space == "host" and f.name} | (hosts or set())
    for item in items:
        if isinstance(item, Function):
            if item.space == "host" or item.space == "constexpr" and item.name in host_names:
                _blank(out, item.head_start, item.body_close + 1)
            elif item.space == "constexpr":
                at = item.head_start + re.search(r"\bconstexpr\b", code[item.head_start:item.body_open]).start()
                out[at] = "__host__ __device__ c"  # "constexpr" keeps its line, with both spaces before it
            continue
        stmt = code[item[0]:item[1]]
        words = set(_IDENT.findall(stmt))
        declares_host = (re.search(r"\w\s*\([^=]*\)\s*(?:const\s*)?;$", stmt.strip()) is not None
                         and "=" not in _outside_parentheses(stmt)  # not a variable: kWidth = sizeof(T);
                         and not words & _DEVICE_WORDS and not _space_in(words, macros))
        # A host function named in an initializer (a launcher table); a member that shares its name stays.
        names_host = bool(words & host_names) and "=" in stmt and not words & _DEVICE_WORDS
        if names_host or declares_host:
            _blank(out, item[0], item[1])
    return _keep_directives(text, out)


# Statements that look like a function's declaration but are kept: device ones, and type names
# (a pointer-to-function typedef reads like a declaration).
_DEVICE_WORDS = {"__device__", "__global__", "__constant__", "__shared__", "typedef", "using"}


def _outside_parentheses(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch != ")":
            out.append(ch)
    return "".join(out)


def _space_in(words: set[str], macros: dict[str, str]) -> bool:
    return any("__device__" in macros.get(w, "") for w in words)


def closure(source: pathlib.Path, include_dirs) -> list[tuple[str, pathlib.Path]]:
    """(include name, path) of the source (under its own name) and the headers it reaches (a header
    not found is left out: the compile reports it)."""
    source = pathlib.Path(source)
    return [(source.name if name == "<source>" else name, path)
            for name, path in include_closure(source, include_dirs) if path is not None]


HOST_MAIN = "wb_host_view.cpp"  # the host view's main file, whatever the file's own name (load_inline's is its hash)


@dataclass(frozen=True)
class Views:
    """{include name: text} for each side (the host side's main file as HOST_MAIN), the host key, the
    kernels' names, and the declarations of device variables at namespace scope."""
    host: dict[str, str]
    device: dict[str, str]
    host_key: str
    kernels: frozenset[str]
    variables: tuple[str, ...]


def device_variables(text: str, macros: dict[str, str]) -> list[str]:
    """The declarations of device variables outside functions (a function's declaration is none)."""
    code, found = code_only(text), []
    for item in _items(text, frozenset(macros.items())):
        statement = "" if isinstance(item, Function) else code[item[0]:item[1]].strip()
        if set(_IDENT.findall(statement)) & {"__device__", "__constant__", "__managed__"} and not re.search(
                r"\)\s*(?:const\s*)?;$", statement):
            found.append(" ".join(statement.split()))
    return found


def split(files: list[tuple[str, pathlib.Path]]) -> Views:
    """The views of a closure (closure())."""
    texts = {name: path.read_text(errors="replace") for name, path in files}
    macros = space_macros(texts.values())
    hosts = host_names(texts.values(), macros)
    host = {HOST_MAIN if name == files[0][0] else name: host_view(t, macros) for name, t in texts.items()}
    device = {name: device_view(t, macros, hosts) for name, t in texts.items()}
    kernels = frozenset(f.name for t in texts.values() for f in functions(t, macros) if f.space == "global")
    variables = tuple(v for t in texts.values() for v in device_variables(t, macros))
    h = hashlib.sha256()
    for name, text in sorted(host.items()):
        h.update(name.encode() + b"\0" + tokens(text).encode() + b"\0")
    return Views(host, device, h.hexdigest(), kernels, variables)
