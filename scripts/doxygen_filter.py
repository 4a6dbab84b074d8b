#!/usr/bin/env python3
"""Doxygen input filter for Ember's public headers (docs/Doxyfile names it; scripts/api_docs.sh).

Ember's headers document in plain // comments, by one convention, which this filter turns into
Doxygen's syntax without touching the sources:
  - the comment a file opens with says what lives there: it becomes the file's documentation;
  - a comment right above a declaration documents it; when a run of declarations follows the
    comment with no blank line, the comment documents each declaration of the run that has no
    comment of its own;
  - a trailing comment (`int size;  // in bytes`) documents its line's declaration;
  - a section rule (`// ---- views and copies ----`) documents, with its title, the declarations
    of its section that no comment documents;
  - `EMBER_MODULE(Name);` without a comment is documented as the holder of NameImpl.
Declarations that none of these reach are reported by Doxygen as undocumented. Code inside
function bodies is left as it is.
"""
import re
import sys

SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
RULE = re.compile(r"^\s*//\s*(-{3,}|={3,})\s*(.*?)\s*(-{3,}|={3,})?\s*$")
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:")


def strip_code(line):
    """The line without its // comment and with string/char literals emptied."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def doc_lines(indent, texts):
    return [" " * indent + "/// " + t for t in texts]


def convert(text):
    lines = text.split("\n")
    out = []
    i = 0
    if lines and lines[0].lstrip().startswith("//"):
        out.append("/// \\file")
        while i < len(lines) and lines[i].lstrip().startswith("//"):
            out.append("///" + lines[i].lstrip()[2:])
            i += 1
    # A stack of open braces: True for a declaration scope (namespace, class, ...), False for code.
    scopes = []
    sections = {}  # depth -> section title
    pending_comment = None  # (texts, run_active) of the comment block just above
    run_doc = None  # the comment texts that document the current run of declarations
    header = ""  # text of the current declaration so far (to see scope keywords before '{')
    in_declaration = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        depth = len(scopes)
        in_code = any(s is False for s in scopes)
        if in_code:
            out.append(line)
        elif not stripped:
            out.append(line)
            pending_comment, run_doc = None, None
        elif RULE.match(line):
            title = RULE.match(line).group(2).strip(" -=")
            sections[depth] = title
            pending_comment, run_doc = None, None
            out.append(line)
        elif stripped.startswith("//"):
            texts = []
            indent = len(line) - len(line.lstrip())
            while i < len(lines) and lines[i].strip().startswith("//") and not RULE.match(lines[i]):
                texts.append(lines[i].strip()[2:].lstrip("/").strip())
                i += 1
            out.extend(doc_lines(indent, texts))
            pending_comment = texts
            run_doc = None
            continue
        elif stripped.startswith("#") or ACCESS.match(line) or stripped.startswith("}"):
            out.append(line)
            if ACCESS.match(line):
                pending_comment, run_doc = None, None
        else:
            indent = len(line) - len(line.lstrip())
            holder = re.match(r"^\s*EMBER_MODULE\((\w+)\)", line)
            if holder and pending_comment is None and not in_declaration:
                name = holder.group(1)
                pending_comment = [f"{name}: the module holder of {name}Impl, a shared pointer to "
                                   "it (as libtorch's TORCH_MODULE); see " + name + "Impl."]
                out.extend(doc_lines(indent, pending_comment))
            if not in_declaration:
                # A new declaration starts on this line.
                if pending_comment is not None:
                    run_doc, pending_comment = pending_comment, None  # documented just above
                elif run_doc is not None:
                    out.extend(doc_lines(indent, run_doc))
                elif sections.get(depth):
                    out.extend(doc_lines(indent, [sections[depth]]))
                header = ""
            code = strip_code(line)
            m = re.match(r"^(.*?[;,{])\s*//(?!/)\s?(.*)$", line)
            if (m and "//" not in strip_code(m.group(1)) and '"' not in m.group(1) and
                    not m.group(2).startswith("NOLINT")):
                out.append(m.group(1) + " ///< " + m.group(2))
            else:
                out.append(line)
            header += " " + code
            in_declaration = not re.search(r"[;{}]\s*$", code.rstrip()) and not re.match(
                r"^\s*template\s*<.*>\s*$", code)
            if re.match(r"^\s*template\s*<.*>\s*$", code):
                in_declaration = True  # the declaration continues on the next line
        # Track braces of this line (of everything except comments and literals).
        code = strip_code(line) if not stripped.startswith("//") else ""
        for ch in code:
            if ch == "{":
                before_brace = header.split("{")[0]
                is_decl = not in_code and bool(
                    re.search(r"\b(namespace|class|struct|union|enum)\b[^()]*$", before_brace))
                scopes.append(is_decl)
                header = ""
            elif ch == "}":
                if scopes:
                    scopes.pop()
                sections.pop(len(scopes) + 1, None)
        if code.rstrip().endswith(("{", "}", ";")):
            in_declaration = False
        i += 1
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(convert(f.read()))
