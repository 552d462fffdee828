#!/usr/bin/env python3
"""Writes a realistic R8 mapping file of about --size-mb megabytes to OUTPUT.

The same --seed always gives the same file, so benchmark runs compare like with like.
What it holds, in the proportions of mappings of large Android apps:

- the R8 header (compiler, version, min_api, map id and hash);
- classes in nested packages, most renamed to short names, some kept (activities,
  services), with `sourceFile` metadata; Kotlin file classes (`...Kt`), companions,
  inner classes and synthesized lambda classes (`$$ExternalSyntheticLambda<n>`);
- fields;
- methods with minified line ranges mapping to original lines (single lines and spans),
  overloads sharing one obfuscated name, inline chains one to three deep that call
  methods of other classes, synthesized bridges, line-less (ProGuard-style) entries;
- now and then an R8 `rewriteFrame` rule, and outline methods with their callsites.

Usage: gen-proguard-mapping.py OUTPUT [--size-mb 50] [--seed 1]
"""

import argparse
import hashlib
import random
import sys

WORDS = (
    "account action adapter album alert anchor animation api app archive asset audio auth "
    "avatar badge banner basket batch billing binding bitmap block bookmark bridge broker "
    "browser buffer builder bundle button cache calendar camera canvas card cart catalog "
    "category channel chart chat checkout chip client clock codec collection color column "
    "comment config connection contact content context controller converter cookie cursor "
    "dashboard database decoder delegate detail device dialog directory download draft "
    "drawer editor emoji encoder engine entry event export feed fetcher field file filter "
    "flow folder font footer form fragment frame gallery gateway gesture graph grid group "
    "handler header history holder home icon image importer index input inbox invoice item "
    "job keyboard label launcher layout ledger library limit link list loader locale "
    "location login logger map marker media menu merger message meter migration mode model "
    "module monitor network node note notification observer offer order overlay pager "
    "panel parser payment permission photo picker player playlist plugin policy popup post "
    "preference preview price printer processor product profile progress provider proxy "
    "purchase query queue reader receipt recorder redirect region registry renderer "
    "reporter repository request resolver resource response review router row rule "
    "scanner schedule schema screen scroll search section selector sender sensor session "
    "setting share sheet shortcut signal slider snapshot socket sorter source span state "
    "status step storage store stream style subscription summary surface sync tab table "
    "tag task template theme thread ticket tile timeline timer toast token toolbar "
    "tracker transaction transfer tree trigger upload user validator value vault video "
    "view viewer wallet watcher widget window worker writer zone"
).split()

PACKAGE_ROOTS = [
    "com.northwind.app",
    "com.northwind.core",
    "com.northwind.feature",
    "io.lattice.sdk",
    "org.tessellate.ui",
    "net.meridian.data",
]

CLASS_SUFFIXES = [
    "",
    "Manager",
    "Repository",
    "ViewModel",
    "Fragment",
    "Activity",
    "Adapter",
    "Service",
    "Helper",
    "Impl",
    "Factory",
    "Controller",
    "Presenter",
    "UseCase",
    "Mapper",
]

PRIMITIVES = ["int", "long", "boolean", "float", "double", "byte", "char", "short"]
JDK_TYPES = [
    "java.lang.String",
    "java.lang.Object",
    "java.util.List",
    "java.util.Map",
    "java.util.Set",
    "android.os.Bundle",
    "android.view.View",
    "android.content.Context",
    "kotlin.jvm.functions.Function1",
    "kotlin.coroutines.Continuation",
]
VERBS = (
    "get set load save update create delete find build apply handle process render bind "
    "parse check compute dispatch fetch notify observe open close reset refresh resolve "
    "start stop submit sync toggle track validate visit write read emit merge"
).split()


def camel(words):
    return "".join(w[:1].upper() + w[1:] for w in words)


def short_name(n):
    """0 → a, 25 → z, 26 → aa, ...: R8's minified identifiers."""
    name = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        name = chr(ord("a") + r) + name
    return name


class Generator:
    def __init__(self, seed, target_bytes):
        self.rng = random.Random(seed)
        self.target = target_bytes
        self.written = 0
        self.classes = []  # (original name, obfuscated name) of classes written so far
        self.methods = []  # (class, method, params, return type) for inline targets
        self.seen_classes = set()
        self.obf_counter = {}

    def type_name(self):
        r = self.rng.random()
        if r < 0.35:
            return self.rng.choice(PRIMITIVES)
        if r < 0.7 or not self.classes:
            return self.rng.choice(JDK_TYPES)
        return self.rng.choice(self.classes)[0]

    def params(self):
        return ",".join(self.type_name() for _ in range(self.rng.choice([0, 0, 1, 1, 1, 2, 2, 3, 4])))

    def method_name(self):
        return self.rng.choice(VERBS) + camel(self.rng.sample(WORDS, self.rng.choice([1, 1, 2])))

    def class_name(self):
        while True:
            package = self.rng.choice(PACKAGE_ROOTS) + "." + ".".join(
                self.rng.sample(WORDS, self.rng.choice([1, 2, 2, 3]))
            )
            base = camel(self.rng.sample(WORDS, self.rng.choice([1, 2]))) + self.rng.choice(CLASS_SUFFIXES)
            name = package + "." + base
            if name not in self.seen_classes:
                self.seen_classes.add(name)
                return package, base, name

    def obfuscated(self, package, keep):
        if keep:
            return None
        # R8 repackages into a few short packages; names count up per package.
        top = self.rng.choice(["a", "b", "c", "d", "e", "f", "g", "h"])
        n = self.obf_counter.get(top, 0)
        self.obf_counter[top] = n + 1
        return top + "." + short_name(n)

    def emit(self, out, line):
        out.append(line)
        self.written += len(line) + 1

    def header(self, out):
        digest = hashlib.sha256(str(self.rng.random()).encode()).hexdigest()
        for line in [
            "# compiler: R8",
            "# compiler_version: 8.5.35",
            "# min_api: 24",
            "# common_typos_disable",
            '# {"id":"com.android.tools.r8.mapping","version":"2.2"}',
            "# pg_map_id: " + digest[:7],
            "# pg_map_hash: SHA-256 " + digest,
        ]:
            self.emit(out, line)

    def write_class(self, out):
        rng = self.rng
        package, base, name = self.class_name()
        kotlin = rng.random() < 0.6
        kind = rng.random()
        if kotlin and kind < 0.15:
            base_file = base
            name = name + "Kt"
        elif kind < 0.25:
            base_file = base
            name = name + "$" + camel(rng.sample(WORDS, 1))
        elif kind < 0.3:
            base_file = base
            name = name + "$Companion"
        else:
            base_file = base
        file_name = base_file + (".kt" if kotlin else ".java")
        keep = name.endswith(("Activity", "Service")) and rng.random() < 0.7
        obf = self.obfuscated(package, keep) or name
        self.classes.append((name, obf))

        self.emit(out, f"{name} -> {obf}:")
        self.emit(out, '# {"id":"sourceFile","fileName":"%s"}' % file_name)

        for i in range(rng.choice([0, 0, 1, 2, 3, 5, 8])):
            self.emit(out, f"    {self.type_name()} {camel(rng.sample(WORDS, 1)).lower()}{i} -> {short_name(i)}")

        obf_names = 0
        next_line = {}  # obfuscated method name -> next free minified line
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4, 5, 6, 8, 12, 20])):
            method = self.method_name()
            params = self.params()
            ret = rng.choice(["void", "void", "boolean", "int"] + JDK_TYPES[:3])
            # R8 gives methods with distinct signatures the same short name where it can.
            if obf_names and rng.random() < 0.3:
                obf_method = short_name(rng.randrange(obf_names))
            else:
                obf_method = short_name(obf_names)
                obf_names += 1
            if rng.random() < 0.05:
                # Line-less (ProGuard-style, or R8 without line info).
                self.emit(out, f"    {ret} {method}({params}) -> {obf_method}")
                continue
            original_line = rng.randrange(10, 2000)
            for _ in range(rng.choice([1, 1, 1, 2, 3, 4])):
                start = next_line.get(obf_method, 1)
                span = rng.choice([1, 1, 1, 2, 4, 8])
                end = start + span - 1
                next_line[obf_method] = end + 1
                if self.methods and rng.random() < 0.25:
                    # An inline chain: innermost callee first, this method last.
                    for _ in range(rng.choice([1, 1, 2, 3])):
                        cls, callee, cparams, cret = rng.choice(self.methods)
                        line = rng.randrange(5, 900)
                        self.emit(out, f"    {start}:{end}:{cret} {cls}.{callee}({cparams}):{line}:{line} -> {obf_method}")
                    self.emit(out, f"    {start}:{end}:{ret} {method}({params}):{original_line} -> {obf_method}")
                    if rng.random() < 0.05:
                        self.emit(
                            out,
                            '    # {"id":"com.android.tools.r8.rewriteFrame","conditions":'
                            '["throws(Ljava/lang/NullPointerException;)"],"actions":["removeInnerFrames(1)"]}',
                        )
                elif span == 1:
                    self.emit(out, f"    {start}:{end}:{ret} {method}({params}):{original_line}:{original_line} -> {obf_method}")
                else:
                    self.emit(
                        out,
                        f"    {start}:{end}:{ret} {method}({params}):{original_line}:{original_line + span - 1} -> {obf_method}",
                    )
                original_line += span + rng.randrange(0, 5)
            if rng.random() < 0.03:
                self.emit(out, f"    1:1:void $r8$lambda${short_name(rng.randrange(10**6))}({params}):0:0 -> {short_name(obf_names)}")
                self.emit(out, '      # {"id":"com.android.tools.r8.synthesized"}')
                obf_names += 1
            if len(self.methods) < 200_000:
                self.methods.append((name, method, params, ret))

        if rng.random() < 0.1:
            # A synthesized lambda class of this class.
            lam = f"{name}$$ExternalSyntheticLambda{rng.randrange(4)}"
            if lam not in self.seen_classes:
                self.seen_classes.add(lam)
                lam_obf = self.obfuscated(package, False)
                self.emit(out, f"{lam} -> {lam_obf}:")
                self.emit(out, '# {"id":"sourceFile","fileName":"R8$$SyntheticClass"}')
                self.emit(out, '# {"id":"com.android.tools.r8.synthesized"}')
                self.emit(out, f"    {name} f$0 -> a")
                self.emit(out, "    1:1:void run():0:0 -> run")
                self.emit(out, '      # {"id":"com.android.tools.r8.synthesized"}')

    def write_outline(self, out):
        name = f"{self.rng.choice(PACKAGE_ROOTS)}.Outlines$$ExternalSyntheticOutline{len(self.classes)}"
        obf = self.obfuscated(None, False)
        self.emit(out, f"{name} -> {obf}:")
        self.emit(out, '# {"id":"sourceFile","fileName":"R8$$SyntheticClass"}')
        self.emit(out, '# {"id":"com.android.tools.r8.synthesized"}')
        self.emit(out, f"    1:3:void {name}.m(java.lang.String,int):0:0 -> a")
        self.emit(out, '      # {"id":"com.android.tools.r8.synthesized"}')
        self.emit(out, '      # {"id":"com.android.tools.r8.outline"}')
        caller, caller_obf = self.rng.choice(self.classes)
        self.emit(out, f"{caller}$OutlineCaller -> {caller_obf}$o:")
        self.emit(out, "    90:90:void callOutline():0:0 -> a")
        self.emit(
            out,
            '      # {"id":"com.android.tools.r8.outlineCallsite","positions":{"1":91,"2":92,"3":93},'
            f'"outline":"L{obf.replace(".", "/")};a(Ljava/lang/String;I)V"}}',
        )
        self.emit(out, "    91:93:void callOutline():40:42 -> a")

    def run(self, path):
        with open(path, "w", encoding="utf-8") as f:
            out = []
            self.header(out)
            while self.written < self.target:
                if self.classes and self.rng.random() < 0.01:
                    self.write_outline(out)
                else:
                    self.write_class(out)
                if len(out) > 10_000:
                    f.write("\n".join(out) + "\n")
                    out.clear()
            f.write("\n".join(out) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--size-mb", type=float, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    gen = Generator(args.seed, int(args.size_mb * 1024 * 1024))
    gen.run(args.output)
    print(
        f"{args.output}: {gen.written} bytes, {len(gen.classes)} classes",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
