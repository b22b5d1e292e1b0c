# Byte-compiles the .py files of a Python environment that lack a valid .pyc,
# into a staging tree that the packer lays over the source (never into the
# source itself). Run by the environment's own interpreter, so the magic
# number and cache tag are the ones that interpreter will look for.
#
# argv: SRC STAGE DISPLAY_ROOT MTIME
#   SRC           the environment being packed (read only)
#   STAGE         where __pycache__/NAME.TAG.pyc files are written, mirroring SRC
#   DISPLAY_ROOT  the path the image will be used at (co_filename prefix)
#   MTIME         the mtime every entry gets in the image ("" = each file's own)
#
# A .pyc is valid (PEP 552) when its magic matches and either it is
# hash-based without source checking, or hash-based with the source's hash,
# or timestamp-based with the source's mtime and size as the image will show
# them. Python compares both fields modulo 2**32.
#
# Prints one JSON object on stdout: counts and the first failures.
import importlib.util
import json
import marshal
import os
import sys

src, stage, display_root, mtime_arg = sys.argv[1:5]
override = int(mtime_arg) if mtime_arg else None
MAGIC = importlib.util.MAGIC_NUMBER
TAG = sys.implementation.cache_tag
if TAG is None:
    sys.exit("this interpreter has no bytecode cache tag (sys.implementation.cache_tag is None)")


def image_mtime(st):
    if override is not None:
        return override
    return min(max(int(st.st_mtime), 0), 0xFFFFFFFF)


def valid(pyc, source, st):
    try:
        with open(pyc, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != MAGIC:
        return False
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:
        if not flags & 2:
            return True
        return head[8:16] == importlib.util.source_hash(source)
    return (
        int.from_bytes(head[8:12], "little") == image_mtime(st) & 0xFFFFFFFF
        and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF
    )


counts = {"checked": 0, "valid": 0, "compiled": 0, "failed_count": 0}
failed = []
for dirpath, dirnames, filenames in os.walk(src):
    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
    for name in sorted(filenames):
        if not name.endswith(".py"):
            continue
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, src)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        counts["checked"] += 1
        cache_rel = importlib.util.cache_from_source(rel, optimization="")
        try:
            with open(path, "rb") as f:
                source = f.read()
        except OSError as e:
            counts["failed_count"] += 1
            failed.append([rel, str(e)])
            continue
        if valid(os.path.join(src, cache_rel), source, st):
            counts["valid"] += 1
            continue
        try:
            code = compile(source, os.path.join(display_root, rel), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            # Python would fail the same way at import; pip skips these too
            # (test files for other versions, templates named .py).
            counts["failed_count"] += 1
            if len(failed) < 20:
                failed.append([rel, "%s: %s" % (type(e).__name__, e)])
            continue
        out = os.path.join(stage, cache_rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        header = (
            MAGIC
            + (0).to_bytes(4, "little")
            + (image_mtime(st) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
        )
        with open(out, "wb") as f:
            f.write(header + marshal.dumps(code))
        counts["compiled"] += 1

counts["failed"] = failed
counts["cache_tag"] = TAG
counts["version"] = "%d.%d.%d" % sys.version_info[:3]
print(json.dumps(counts))
