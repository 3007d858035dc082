#!/usr/bin/env python3
"""Renders a man page source (docs/man/NAME.1.md) to roff:
python3 tools/man.py SRC VERSION DOCDIR  (@DOCDIR@ in the source: where the docs are installed)

We write the pages in a small Markdown of our own rather than generate them from --help
with help2man: the pages say more than --help (environment, files, examples, see also),
the build needs nothing it does not have already (python3), and the sources read well on
the web. tests/install.sh checks that every option and command --help names is in its
page. What the sources may hold, one construct per block:

  # NAME(1) -- summary        the title line, first
  ## SECTION                  a section (.SH)
  plain lines                 a paragraph (.PP); a blank line ends it
  - text                      a bullet (.IP); continuation lines indented by 2
  `term` words                a term whose description follows, indented by 4 (.TP)
  ``` ... ```                 an example, as it is (.EX/.EE)
Inline: `code` is bold, *word* italic. The page is dated by the source's commit date where
git knows it, else by the file's own date, so that a build is reproducible.
"""
import datetime
import os
import re
import subprocess
import sys


def esc(text):
    """Roff-escapes plain text: backslashes, and dashes written as minus signs."""
    return text.replace("\\", "\\e").replace("-", "\\-")


def inline(text):
    out = []
    for i, part in enumerate(re.split(r"`([^`]*)`", text)):
        if i % 2:
            out.append("\\fB" + esc(part) + "\\fR")
        else:
            part = esc(part)
            out.append(re.sub(r"\*([^*\s][^*]*)\*", r"\\fI\1\\fR", part))
    line = "".join(out)
    # A line starting with . or ' would be a request.
    return "\\&" + line if line[:1] in (".", "'") else line


def page_date(src):
    try:
        stamp = subprocess.run(["git", "log", "-1", "--format=%cs", "--", src],
                               capture_output=True, text=True, check=True,
                               cwd=os.path.dirname(os.path.abspath(src))).stdout.strip()
        if stamp:
            return stamp
    except (OSError, subprocess.CalledProcessError):
        pass
    return datetime.datetime.fromtimestamp(os.path.getmtime(src),
                                           datetime.timezone.utc).strftime("%Y-%m-%d")


def render(src, version, docdir):
    lines = open(src, encoding="utf-8").read().replace("@DOCDIR@", docdir).split("\n")
    m = re.match(r"^# (\S+)\((\d)\) -- (.*)$", lines[0])
    if not m:
        raise SystemExit("%s:1: the first line must be '# NAME(SECTION) -- summary'" % src)
    name, sect, summary = m.groups()
    out = ['.TH "%s" "%s" "%s" "mpsshim %s" "mpsshim"' % (name.upper(), sect, page_date(src),
                                                          version),
           ".SH NAME", "%s \\- %s" % (esc(name), inline(summary))]
    i = 1
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("## "):
            out.append(".SH " + esc(line[3:].strip().upper()))
            i += 1
        elif line.startswith("```"):
            out.append(".EX")
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(esc(lines[i]) if lines[i][:1] not in (".", "'") else "\\&" + esc(lines[i]))
                i += 1
            out.append(".EE")
            i += 1
        elif line.startswith("- "):
            item = [line[2:]]
            i += 1
            while i < len(lines) and lines[i].startswith("  ") and not lines[i].startswith("    "):
                item.append(lines[i].strip())
                i += 1
            out += [".IP \\(bu 2", inline(" ".join(item))]
        elif i + 1 < len(lines) and lines[i + 1].startswith("    ") and not line.startswith(" "):
            out += [".TP", inline(line.strip())]
            i += 1
            body = []
            while i < len(lines) and lines[i].startswith("    "):
                body.append(lines[i].strip())
                i += 1
            out.append(inline(" ".join(body)))
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "- ", "```")):
                para.append(lines[i].strip())
                i += 1
            out += [".PP", inline(" ".join(para))]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: man.py SRC.md VERSION DOCDIR")
    sys.stdout.write(render(*sys.argv[1:]))


if __name__ == "__main__":
    main()
