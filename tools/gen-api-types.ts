// Generates src/api/v1alpha1.ts from the CRDs in crds/ (npm run gen:api). The CRDs are the source of truth;
// test/unit/api-types.test.ts fails when the committed file no longer matches what this produces.
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadAllYaml, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { format, resolveConfig } from "prettier";

const repoRoot = resolve(import.meta.dirname, "..");
export const CRD_FILES = [
  "crds/stockade.io_fenceagents.yaml",
  "crds/stockade.io_fencingpolicies.yaml",
  "crds/stockade.io_nodefences.yaml",
  "crds/stockade.io_fencerecords.yaml",
];
export const OUTPUT = join(repoRoot, "src/api/v1alpha1.ts");

/** The parts of a JSON schema that shape a TypeScript type. */
interface Schema {
  type?: string;
  description?: string;
  enum?: unknown[];
  default?: unknown;
  intOrString: boolean;
  properties?: Map<string, Schema>;
  required: Set<string>;
  items?: Schema;
  additionalProperties?: Schema | boolean;
}

type Raw = Record<string, unknown>;

// loadAllYaml turns a CRD into client-node models (`_enum`, `_default`, `x_kubernetes_int_or_string`) only down to
// the fields the models type as `any` (items, additionalProperties); below those the schema is plain JSON. Read both.
function pick(o: Raw, ...keys: string[]): unknown {
  for (const k of keys) if (o[k] !== undefined) return o[k];
  return undefined;
}

function schemaOf(raw: unknown, where: string): Schema {
  if (typeof raw !== "object" || raw === null) throw new Error(`${where}: expected a schema object`);
  const o = raw as Raw;
  const props = o.properties as Raw | undefined;
  const add = o.additionalProperties;
  const s: Schema = {
    intOrString: pick(o, "x_kubernetes_int_or_string", "x-kubernetes-int-or-string") === true,
    required: new Set((o.required as string[] | undefined) ?? []),
  };
  if (typeof o.type === "string") s.type = o.type;
  if (typeof o.description === "string") s.description = o.description;
  const e = pick(o, "_enum", "enum");
  if (Array.isArray(e)) s.enum = e;
  const d = pick(o, "_default", "default");
  if (d !== undefined) s.default = d;
  if (props) s.properties = new Map(Object.entries(props).map(([k, v]) => [k, schemaOf(v, `${where}.${k}`)]));
  if (o.items !== undefined) s.items = schemaOf(o.items, `${where}[]`);
  if (typeof add === "boolean") s.additionalProperties = add;
  else if (add !== undefined) s.additionalProperties = schemaOf(add, `${where}{}`);
  return s;
}

const pascal = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
const isIdentifier = (s: string) => /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(s);

/** "FencingPolicy" + "fencingpolicies" → "FENCING_POLICIES": the kind's words, the last one as the plural spells it. */
function pluralConstant(kind: string, plural: string): string {
  const words = kind.split(/(?=[A-Z])/).map((w) => w.toLowerCase());
  const head = words.slice(0, -1);
  const prefix = head.join("");
  if (!plural.startsWith(prefix)) throw new Error(`plural ${plural} does not start with the words of kind ${kind}`);
  return [...head, plural.slice(prefix.length)].join("_").toUpperCase();
}

/** A field's doc comment says its default; an interface's does not (the default belongs to the field). */
function jsdoc(s: Schema, indent: string, withDefault = true): string {
  const lines: string[] = [];
  if (s.description) lines.push(...wrap(s.description.replaceAll("*/", "*\\/"), 116 - indent.length));
  if (withDefault && s.default !== undefined) lines.push(`@default ${JSON.stringify(s.default)}`);
  if (!lines.length) return "";
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join("\n")}\n${indent} */\n`;
}

function wrap(text: string, width: number): string[] {
  const out: string[] = [];
  for (const para of text.split("\n")) {
    let line = "";
    // A template such as {{ name }} stays on one line.
    for (const word of para.match(/\{\{.*?\}\}\S*|\S+/g) ?? []) {
      if (line && line.length + 1 + word.length > width) {
        out.push(line);
        line = word;
      } else line = line ? `${line} ${word}` : word;
    }
    out.push(line);
  }
  return out;
}

/** Emits interfaces in declaration order: a parent before the types of its fields. */
class Emitter {
  readonly blocks: string[] = [];
  private readonly names = new Set<string>();

  /** `head` produces fields of its own (the kind's apiVersion, spec…), after the interface's slot is taken. */
  declare(name: string, s: Schema, head: () => string[] = () => []): string {
    if (this.names.has(name)) throw new Error(`two schemas would both be named ${name}`);
    this.names.add(name);
    const slot = this.blocks.push("") - 1;
    const fields = head();
    for (const [key, p] of s.properties ?? []) {
      const optional = s.required.has(key) ? "" : "?";
      fields.push(`${jsdoc(p, "  ")}  ${isIdentifier(key) ? key : JSON.stringify(key)}${optional}: ${this.type(p, name + pascal(key))};`);
    }
    this.blocks[slot] = `${jsdoc(s, "", false)}export interface ${name} {\n${fields.join("\n")}\n}\n`;
    return name;
  }

  /** The TypeScript type of a schema; a nested object gets an interface named after its path. */
  type(s: Schema, name: string): string {
    if (s.intOrString) return "number | string";
    if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
    switch (s.type) {
      case "string":
        return "string";
      case "integer":
      case "number":
        return "number";
      case "boolean":
        return "boolean";
      case "array": {
        const t = s.items ? this.type(s.items, name) : "unknown";
        return /[| ]/.test(t) ? `(${t})[]` : `${t}[]`;
      }
      case "object":
        if (s.properties) return this.declare(name, s);
        if (typeof s.additionalProperties === "object") return `Record<string, ${this.type(s.additionalProperties, name)}>`;
        return "Record<string, unknown>";
      default:
        return "unknown";
    }
  }
}

function loadCrd(file: string): V1CustomResourceDefinition {
  const docs = loadAllYaml(readFileSync(join(repoRoot, file), "utf8")) as V1CustomResourceDefinition[];
  const crd = docs.find((d) => d?.kind === "CustomResourceDefinition");
  if (!crd) throw new Error(`${file}: no CustomResourceDefinition in it`);
  return crd;
}

/** The contents of src/api/v1alpha1.ts, formatted with the repository's prettier config. */
export async function generate(): Promise<string> {
  const crds = CRD_FILES.map(loadCrd);
  const group = crds[0]!.spec.group;
  const version = crds[0]!.spec.versions.find((v) => v.storage)!.name;
  const head = [
    "// generated by tools/gen-api-types.ts from crds/ — do not edit",
    'import type { V1ListMeta, V1ObjectMeta } from "@kubernetes/client-node";',
    "",
    `export const GROUP = ${JSON.stringify(group)};`,
    `export const VERSION = ${JSON.stringify(version)};`,
    `export const API_VERSION = ${JSON.stringify(`${group}/${version}`)};`,
  ];
  const em = new Emitter();
  for (const [i, crd] of crds.entries()) {
    const file = CRD_FILES[i]!;
    const { kind, plural, listKind = `${kind}List` } = crd.spec.names;
    const v = crd.spec.versions.find((x) => x.name === version);
    if (crd.spec.group !== group || !v?.schema?.openAPIV3Schema) throw new Error(`${file}: expected a ${group}/${version} schema`);
    head.push(`export const ${pluralConstant(kind, plural)} = ${JSON.stringify(plural)};`);
    const root = schemaOf(v.schema.openAPIV3Schema, kind);
    const spec = root.properties?.get("spec");
    const status = root.properties?.get("status");
    if (!spec) throw new Error(`${file}: the schema has no spec`);
    // The kind's own schema only matters for its description: its fields are fixed.
    em.declare(kind, { ...root, properties: new Map() }, () => [
      `  apiVersion: ${JSON.stringify(`${group}/${version}`)};`,
      `  kind: ${JSON.stringify(kind)};`,
      "  metadata: V1ObjectMeta;",
      `${jsdoc(spec, "  ")}  spec: ${em.type(spec, `${kind}Spec`)};`,
      ...(status ? [`${jsdoc(status, "  ")}  status?: ${em.type(status, `${kind}Status`)};`] : []),
    ]);
    em.declare(
      listKind,
      { required: new Set(), intOrString: false, description: `A list of ${kind} objects, as the API returns them.` },
      () => [
        `  apiVersion: ${JSON.stringify(`${group}/${version}`)};`,
        `  kind: ${JSON.stringify(listKind)};`,
        "  metadata: V1ListMeta;",
        `  items: ${kind}[];`,
      ],
    );
  }
  const source = `${head.join("\n")}\n\n${em.blocks.join("\n")}`;
  return format(source, { ...(await resolveConfig(OUTPUT)), parser: "typescript", filepath: OUTPUT });
}

if (import.meta.main) {
  writeFileSync(OUTPUT, await generate());
  console.log(`wrote ${OUTPUT}`);
}
