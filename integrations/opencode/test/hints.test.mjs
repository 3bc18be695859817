// The plugin's shell-command reading (`commandHints`, `programOf` in ../src/index.ts) against the cases the Python
// SDK is tested on (tests/sdk/shell_hints.json). Node runs no TypeScript, so the plugin is transpiled with the
// `typescript` package (found through NODE_PATH) and its private functions exported for the test only.
// Run: NODE_PATH=<dir holding typescript> node --test integrations/opencode/test/
import assert from "node:assert/strict"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { test } from "node:test"
import { pathToFileURL } from "node:url"

const require = createRequire(import.meta.url)
const ts = require("typescript")
const source = readFileSync(new URL("../src/index.ts", import.meta.url), "utf8")
const { outputText } = ts.transpileModule(`${source}\nexport { commandHints, programOf }\n`, {
  compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
})
const transpiled = join(mkdtempSync(join(tmpdir(), "tao-opencode-")), "index.mjs")
writeFileSync(transpiled, outputText)
const plugin = await import(pathToFileURL(transpiled).href)
const cases = JSON.parse(readFileSync(new URL("../../../tests/sdk/shell_hints.json", import.meta.url), "utf8"))

test("commandHints reads each command as tao_sdk.command_hints does", () => {
  for (const known of cases.command_hints) {
    const { sleep_s, timeout_s, background } = known
    const command = known.command
    const expected = { background }
    if (sleep_s !== null) expected.sleep_s = sleep_s
    if (timeout_s !== null) expected.timeout_s = timeout_s
    assert.deepEqual(plugin.commandHints(command), expected, JSON.stringify(command))
  }
})

test("programOf names the program of each command as tao_sdk.hints.program_of does", () => {
  for (const { command, program } of cases.program_of) {
    assert.equal(plugin.programOf(command), program ?? undefined, JSON.stringify(command))
  }
})
