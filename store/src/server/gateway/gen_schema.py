#!/usr/bin/env python3
"""Generates schema.rs: the message, enum and RPC tables the gateway
transcodes JSON and protobuf with, read from etcd's own .proto files (the
versions in the Go module cache, as go.mod pins them).

Usage (from store/): python3 src/server/gateway/gen_schema.py > src/server/gateway/schema.rs
"""
import os
import re
import subprocess
import sys

ETCD = "v3.6.16"


def sources():
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    api = os.path.join(cache, "go.etcd.io/etcd/api/v3@" + ETCD)
    server = os.path.join(cache, "go.etcd.io/etcd/server/v3@" + ETCD)
    return [
        os.path.join(api, "mvccpb/kv.proto"),
        os.path.join(api, "authpb/auth.proto"),
        os.path.join(api, "etcdserverpb/rpc.proto"),
        os.path.join(server, "etcdserver/api/v3lock/v3lockpb/v3lock.proto"),
        os.path.join(server, "etcdserver/api/v3election/v3electionpb/v3election.proto"),
    ]


TOKEN = re.compile(r'\s+|//[^\n]*|/\*.*?\*/|("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_.]*|-?[0-9]+)|(.)', re.S)


def tokens(text):
    out = []
    for m in TOKEN.finditer(text):
        t = m.group(1) or m.group(2) or m.group(3)
        if t:
            out.append(t)
    return out


class P:
    def __init__(self, toks):
        self.t, self.i = toks, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def next(self):
        self.i += 1
        return self.t[self.i - 1]

    def expect(self, s):
        t = self.next()
        if t != s:
            raise SystemExit(f"expected {s!r}, got {t!r} at token {self.i}")

    def skip_statement(self):
        """Skips to the end of a statement (`;` at depth 0, or a closing `}` of a block)."""
        depth = 0
        while True:
            t = self.next()
            if t in "{[(" and len(t) == 1:
                depth += 1
            elif t in "}])" and len(t) == 1:
                depth -= 1
                if depth == 0 and t == "}" and self.peek() != ";":
                    return
            elif t == ";" and depth == 0:
                return

    def block(self):
        """The tokens of a balanced `{ ... }` block, consumed."""
        self.expect("{")
        depth, start = 1, self.i
        while depth:
            t = self.next()
            depth += (t == "{") - (t == "}")
        return self.t[start:self.i - 1]


messages, enums, rpcs = {}, {}, []


def parse_enum(p, full):
    body = P(p.block())
    values = []
    while body.peek() is not None:
        t = body.peek()
        if t in ("option", "reserved"):
            body.skip_statement()
            continue
        if t == ";":
            body.next()
            continue
        name = body.next()
        body.expect("=")
        values.append((int(body.next()), name))
        body.skip_statement()
    enums[full] = values


def parse_message(p, full, pkg):
    body = P(p.block())
    fields = []

    def field(b, oneof):
        rep = False
        t = b.next()
        if t == "repeated":
            rep, t = True, b.next()
        name = b.next()
        b.expect("=")
        num = int(b.next())
        b.skip_statement()
        fields.append(dict(type=t, name=name, num=num, repeated=rep, oneof=oneof, scope=full, pkg=pkg))

    while body.peek() is not None:
        t = body.peek()
        if t in ("option", "reserved"):
            body.skip_statement()
        elif t == ";":
            body.next()
        elif t == "enum":
            body.next()
            n = body.next()
            parse_enum(body, full + "." + n)
        elif t == "message":
            body.next()
            n = body.next()
            parse_message(body, full + "." + n, pkg)
        elif t == "oneof":
            body.next()
            oname = body.next()
            ob = P(body.block())
            while ob.peek() is not None:
                if ob.peek() == "option":
                    ob.skip_statement()
                else:
                    field(ob, oname)
        elif t == "map":
            raise SystemExit(f"map field in {full}: not supported")
        else:
            field(body, None)
    messages[full] = fields
    if body.peek() is None and p.peek() == ";":
        p.next()


def parse_service(p, pkg):
    svc = p.next()
    body = P(p.block())
    while body.peek() is not None:
        t = body.next()
        if t != "rpc":
            if t == "option":
                body.i -= 1
                body.skip_statement()
            continue
        name = body.next()
        body.expect("(")
        cs = body.peek() == "stream"
        if cs:
            body.next()
        req = body.next()
        body.expect(")")
        body.expect("returns")
        body.expect("(")
        ss = body.peek() == "stream"
        if ss:
            body.next()
        resp = body.next()
        body.expect(")")
        posts = []
        if body.peek() == "{":
            inner = body.block()
            for i, tok in enumerate(inner):
                if tok == "post" and inner[i + 1] == ":":
                    posts.append(inner[i + 2].strip('"'))
        elif body.peek() == ";":
            body.next()
        rpcs.append(dict(path=f"/{pkg}.{svc}/{name}", req=req, resp=resp, cs=cs, ss=ss, posts=posts, pkg=pkg))


def parse_file(path):
    p = P(tokens(open(path).read()))
    pkg = ""
    while p.peek() is not None:
        t = p.next()
        if t == "package":
            pkg = p.next()
            p.expect(";")
        elif t in ("syntax", "import", "option"):
            p.i -= 1
            p.skip_statement()
        elif t == "message":
            n = p.next()
            parse_message(p, pkg + "." + n, pkg)
        elif t == "enum":
            n = p.next()
            parse_enum(p, pkg + "." + n)
        elif t == "service":
            parse_service(p, pkg)
        elif t == ";":
            pass
        else:
            raise SystemExit(f"{path}: unexpected {t!r}")


SCALARS = {"int64": "I64", "uint64": "U64", "int32": "I32", "uint32": "U32", "bool": "Bool", "string": "Str", "bytes": "Bytes"}


def resolve(t, scope, pkg):
    """Protobuf's name resolution: the innermost scope outwards, then as written."""
    parts = scope.split(".")
    while parts:
        cand = ".".join(parts) + "." + t
        if cand in messages or cand in enums:
            return cand
        parts.pop()
    if t in messages or t in enums:
        return t
    raise SystemExit(f"cannot resolve {t} in {scope}")


def ident(full, prefix):
    return prefix + "_" + re.sub(r"[^A-Za-z0-9]", "_", full).upper()


def json_name(name):
    # protoc's ToJsonName: underscores dropped, the letter after one capitalised.
    out, up = "", False
    for c in name:
        if c == "_":
            up = True
        elif up:
            out, up = out + c.upper(), False
        else:
            out += c
    return out


def main():
    for path in sources():
        parse_file(path)
    needed, order = set(), []

    def need(full):
        if full in needed:
            return
        needed.add(full)
        order.append(full)
        for f in messages.get(full, []):
            if f["type"] not in SCALARS:
                need(resolve(f["type"], f["scope"], f["pkg"]))

    served = [r for r in rpcs if r["posts"]]
    for r in served:
        r["req"] = resolve(r["req"], r["pkg"], r["pkg"])
        r["resp"] = resolve(r["resp"], r["pkg"], r["pkg"])
        need(r["req"])
        need(r["resp"])
    w = sys.stdout.write
    w("// @generated by gen_schema.py from etcd " + ETCD + "'s .proto files (rpc.proto, kv.proto, auth.proto,\n")
    w("// v3lock.proto, v3election.proto); do not edit. The tables the gateway transcodes with.\n")
    w("use super::json::{Enum, Field, Msg, Rpc, Ty};\n\n")
    for full in sorted(needed):
        if full in enums:
            vals = ", ".join(f'({n}, "{v}")' for n, v in enums[full])
            w(f'pub static {ident(full, "E")}: Enum = Enum {{ name: "{full}", values: &[{vals}] }};\n')
    w("\n")
    for full in sorted(needed):
        if full not in messages:
            continue
        w(f'pub static {ident(full, "M")}: Msg = Msg {{\n    name: "{full}",\n    fields: &[\n')
        for f in messages[full]:
            t = f["type"]
            if t in SCALARS:
                ty = "Ty::" + SCALARS[t]
            else:
                r = resolve(t, f["scope"], f["pkg"])
                ty = f"Ty::Enum(&{ident(r, 'E')})" if r in enums else f"Ty::Msg(&{ident(r, 'M')})"
            oneof = f'Some("{f["oneof"]}")' if f["oneof"] else "None"
            w(f'        Field {{ num: {f["num"]}, name: "{f["name"]}", json: "{json_name(f["name"])}", ty: {ty}, repeated: {str(f["repeated"]).lower()}, oneof: {oneof} }},\n')
        w("    ],\n};\n")
    w("\n/// Every RPC etcd's gateway serves: its gRPC path, its HTTP paths (POST), its messages, its streams.\npub static RPCS: &[Rpc] = &[\n")
    for r in served:
        posts = ", ".join(f'"{p}"' for p in r["posts"])
        w(f'    Rpc {{ grpc: "{r["path"]}", http: &[{posts}], req: &{ident(r["req"], "M")}, resp: &{ident(r["resp"], "M")}, client_stream: {str(r["cs"]).lower()}, server_stream: {str(r["ss"]).lower()} }},\n')
    w("];\n")


main()
