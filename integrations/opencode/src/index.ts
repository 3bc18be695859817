/**
 * TAO plugin for OpenCode: reports each tool call (start, end, duration, timeout hint) and the session's life to
 * `tao proxy`'s hook relay (`POST /tao/v1/events`), which owns the session's coordinator token.
 *
 * | OpenCode hook                                   | TAO event                                     |
 * |-------------------------------------------------|-----------------------------------------------|
 * | `session.created` event                         | register (harness `opencode`, `model` if configured) |
 * | `tool.execute.before`                           | tool_start, hints: bash `timeout` (ms, default 120 s), parsed `sleep` / `timeout` / `&` |
 * | `tool.execute.after` (success only, by design)  | tool_end (`timeout` when bash killed it)      |
 * | `message.part.updated` event, tool state error  | tool_end `error` (a failed tool skips `after`) |
 * | `session.idle` / `session.deleted` events       | close                                         |
 * | `chat.headers`                                  | waits for the session's reports, tags the call |
 *
 * A bash tool_start also names the `program` its command runs (`programOf`), never the command itself.
 *
 * A tool_start or tool_end leaves with `age_s`, the time it waited in the session's queue (behind earlier reports),
 * so the coordinator dates it when the hook ran, not when its report got through.
 *
 * Invariants: nothing here throws into OpenCode or blocks a tool — reports leave in order per session on a promise
 * chain, each bounded by a timeout, and failures are dropped (fail open); `chat.headers` runs before every model
 * call and waits for the session's queued reports, so the coordinator sees a tool end before the next call even
 * though OpenCode does not await `event` hooks. Only this plugin is exported: OpenCode calls every export.
 *
 * The relay URL: plugin option `proxy`, else `$TAO_PROXY_URL`, else the `tao` provider's `baseURL` (without
 * `/v1`), else http://127.0.0.1:8787. The registered `model` is the config's `model` without its `provider/`
 * prefix (what `tao install opencode --model` sets); without one the field is left out, never sent empty.
 *
 * AgentContext: a session registers with `workflow_id` = the id of its root session (a sub-session, one with a
 * `parentID`, inherits its parent's workflow; a parent the plugin never saw is taken as the root) and
 * `parent_session_id` = its `parentID`; each model call carries `x-agent-workflow-id` too, in case the proxy sees
 * the call before the registration.
 */
import type { Plugin } from "@opencode-ai/plugin"

declare const process: { env: Record<string, string | undefined> }

type Status = "ok" | "error" | "timeout"
type Hints = { timeout_s?: number; sleep_s?: number; background?: boolean }
type RelayEvent = { kind: string; session_id: string; [part: string]: unknown }

const DEFAULT_PROXY = "http://127.0.0.1:8787"
const DEFAULT_BASH_TIMEOUT_MS = 120_000
const REPORT_TIMEOUT_MS = 1_500
const DURATION = /^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$/
const UNITS: Record<string, number> = { "": 1, s: 1, m: 60, h: 3600, d: 86400 }
const TIMEOUT_OPTIONS_WITH_VALUE = new Set(["-k", "-s", "--kill-after", "--signal"])

function parseDuration(text: string | undefined): number | undefined {
  const match = text === undefined ? null : DURATION.exec(text.trim())
  return match ? Number(match[1]) * UNITS[match[2]] : undefined
}

function timeoutCap(words: string[]): number | undefined {
  if (words[0] !== "timeout") return undefined
  for (let k = 1; k < words.length; k++) {
    if (TIMEOUT_OPTIONS_WITH_VALUE.has(words[k])) k++
    else if (!words[k].startsWith("-")) return parseDuration(words[k])
  }
  return undefined
}

/** The same reading as `tao_sdk.command_hints`: sleeps in sequence add up, a pipeline counts its longest. */
function commandHints(command: string): Hints {
  const stripped = command.trim()
  const background = stripped.endsWith("&") && !stripped.endsWith("&&")
  let sleep = 0
  const caps: number[] = []
  for (const part of stripped.replace(/&+$/, "").split(/\s*(?:&&|\|\||;|\n)\s*/)) {
    let longest = 0
    for (const stage of part.split("|")) {
      const words = stageWords(stage)
      let stageSleep = 0
      words.forEach((word, k) => {
        if (word === "sleep" && k + 1 < words.length) stageSleep += parseDuration(words[k + 1]) ?? 0
      })
      longest = Math.max(longest, stageSleep)
      const cap = timeoutCap(words)
      if (cap !== undefined) caps.push(cap)
    }
    sleep += longest
  }
  const hints: Hints = { background }
  if (sleep > 0) hints.sleep_s = sleep
  if (caps.length > 0) hints.timeout_s = Math.min(...caps)
  return hints
}

const OPERATOR_CHARS = ";&|()\n"
const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*\+?=/
const PROGRAM_MAX_CHARS = 64

/** A pipeline stage's words as `tao_sdk.hints` reads them (`shlex.split`: quotes removed, `#` and operators are
 * plain characters), or split on blanks where the quoting is unbalanced. */
function stageWords(stage: string): string[] {
  const { words, complete } = shellWords(stage, "", false)
  return complete ? words : stage.trim().split(/\s+/).filter((word) => word !== "")
}

/** Shell words (quotes removed) and runs of operator characters, as `tao_sdk.hints.program_of` reads them with
 * `shlex`; a `#` comment runs to its newline; an unbalanced quote ends the words (`complete` is then false). */
function shellWords(
  command: string,
  operators = OPERATOR_CHARS,
  comments = true,
): { words: string[]; complete: boolean } {
  const text = command.replace(/\\\n/g, " ")
  const words: string[] = []
  const ends = comments ? " \t\r#" : " \t\r"
  let k = 0
  while (k < text.length) {
    const char = text[k]
    if (" \t\r".includes(char)) {
      k++
    } else if (comments && char === "#") {
      while (k < text.length && text[k] !== "\n") k++
    } else if (operators.includes(char)) {
      const start = k
      while (k < text.length && operators.includes(text[k])) k++
      words.push(text.slice(start, k))
    } else {
      let word = ""
      while (k < text.length && !ends.includes(text[k]) && !operators.includes(text[k])) {
        const c = text[k]
        if (c === "'") {
          const close = text.indexOf("'", k + 1)
          if (close < 0) return { words, complete: false }
          word += text.slice(k + 1, close)
          k = close + 1
        } else if (c === '"') {
          k++
          while (k < text.length && text[k] !== '"') {
            if (text[k] === "\\" && (text[k + 1] === '"' || text[k + 1] === "\\")) k++
            word += text[k++]
          }
          if (k >= text.length) return { words, complete: false }
          k++
        } else if (c === "\\") {
          if (k + 1 >= text.length) return { words, complete: false }
          word += text[k + 1]
          k += 2
        } else {
          word += c
          k++
        }
      }
      words.push(word)
    }
  }
  return { words, complete: true }
}

function programName(word: string): string | undefined {
  if (word.includes("$") || word.includes("`")) return undefined
  const base = word.replace(/\/+$/, "").split("/").pop() ?? ""
  const name = base.replace(/[^A-Za-z0-9._+-]/g, "").replace(/^[._+-]+/, "")
  return name.slice(0, PROGRAM_MAX_CHARS) || undefined
}

/** The same rule as `tao_sdk.hints.program_of`: the first word of the first part, as a basename, after leading
 * `VAR=value` assignments and `cd DIR` parts; wrappers (`sudo`, `timeout`, `env`) are the program themselves. */
function programOf(command: string): string | undefined {
  let changesDirectory = false
  let inCd = false
  let inValue = false
  let depth = 0 // of the `$(…)` that an assignment's value opened
  for (const token of shellWords(command).words) {
    const isOperator = [...token].every((char) => OPERATOR_CHARS.includes(char))
    if (inValue && isOperator && (depth > 0 || token.startsWith("("))) {
      depth += token.split("(").length - token.split(")").length
      inValue = depth > 0
    } else if (inValue && depth > 0) {
      continue
    } else if (inCd) {
      inCd = !isOperator
    } else if (ASSIGNMENT.test(token)) {
      inValue = token.endsWith("$")
      depth = 0
    } else if (isOperator || token === "{" || token === "!") {
      inValue = false
    } else if (token === "cd") {
      changesDirectory = inCd = true
    } else {
      return programName(token)
    }
  }
  return changesDirectory ? "cd" : undefined
}

function toolHints(tool: string, args: Record<string, unknown>): Hints {
  if (tool !== "bash") return {}
  const defaultMs = Number(process.env.OPENCODE_EXPERIMENTAL_BASH_DEFAULT_TIMEOUT_MS) || DEFAULT_BASH_TIMEOUT_MS
  const timeoutMs = typeof args.timeout === "number" && args.timeout > 0 ? args.timeout : defaultMs
  const hints = typeof args.command === "string" ? commandHints(args.command) : {}
  const cap = Math.min(timeoutMs / 1000, hints.timeout_s ?? Infinity)
  return { ...hints, timeout_s: cap }
}

function afterStatus(tool: string, output: { output?: unknown; metadata?: unknown }): Status {
  if (tool !== "bash") return "ok"
  const metadata = (output.metadata ?? {}) as { exit?: unknown }
  if (metadata.exit === null && String(output.output ?? "").includes("exceeding timeout")) return "timeout"
  return typeof metadata.exit === "number" && metadata.exit !== 0 ? "error" : "ok"
}

/** A tool start or end with `age_s`: the seconds since `queued` (ms, `Date.now()`); other events as they are. */
function aged(event: RelayEvent, queued: number): RelayEvent {
  const body = event[event.kind]
  if ((event.kind !== "tool_start" && event.kind !== "tool_end") || typeof body !== "object" || body === null) {
    return event
  }
  return { ...event, [event.kind]: { ...body, age_s: Math.max(0, Date.now() - queued) / 1000 } }
}

/** Posts relay events in order per session; `flush` waits for what is queued. Never rejects. */
class Reporter {
  private chains = new Map<string, Promise<void>>()

  constructor(private readonly url: () => string) {}

  send(sessionID: string, events: RelayEvent[]): void {
    const queued = Date.now()
    const previous = this.chains.get(sessionID) ?? Promise.resolve()
    const next = previous.then(() => this.post(events.map((event) => aged(event, queued))))
    this.chains.set(sessionID, next)
    void next.then(() => {
      if (this.chains.get(sessionID) === next) this.chains.delete(sessionID)
    })
  }

  async flush(sessionID?: string): Promise<void> {
    if (sessionID !== undefined) await this.chains.get(sessionID)
    else await Promise.all([...this.chains.values()])
  }

  private async post(events: RelayEvent[]): Promise<void> {
    try {
      const response = await fetch(`${this.url()}/tao/v1/events`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ events }),
        signal: AbortSignal.timeout(REPORT_TIMEOUT_MS),
      })
      await response.body?.cancel()
    } catch {
      // fail open: the agent never waits on TAO
    }
  }
}

function providerProxy(config: unknown): string | undefined {
  const tao = (config as { provider?: Record<string, { options?: { baseURL?: unknown } }> }).provider?.tao
  const base = tao?.options?.baseURL
  return typeof base === "string" ? base.replace(/\/+$/, "").replace(/\/v1$/, "") : undefined
}

/** `provider/model` → `model` (model ids may contain `/` themselves: only the first one separates). */
function configuredModel(config: unknown): string | undefined {
  const model = (config as { model?: unknown }).model
  if (typeof model !== "string") return undefined
  const name = model.slice(model.indexOf("/") + 1).trim().slice(0, 200)
  return name || undefined
}

export const TaoPlugin: Plugin = async (_input, options) => {
  const explicit = typeof options?.proxy === "string" ? options.proxy : process.env.TAO_PROXY_URL
  let proxy = (explicit ?? DEFAULT_PROXY).replace(/\/+$/, "")
  const reporter = new Reporter(() => proxy)
  const running = new Map<string, { sessionID: string; started: number }>()
  const workflows = new Map<string, string>()
  let model: string | undefined

  const end = (callID: string, status: Status, seconds?: number): void => {
    const call = running.get(callID)
    if (call === undefined) return
    running.delete(callID)
    const duration_s = seconds ?? (Date.now() - call.started) / 1000
    const tool_end = { call_id: callID, status, duration_s: Math.max(0, duration_s) }
    reporter.send(call.sessionID, [{ kind: "tool_end", session_id: call.sessionID, tool_end }])
  }

  return {
    config: async (config) => {
      const fromProvider = explicit === undefined ? providerProxy(config) : undefined
      if (fromProvider) proxy = fromProvider
      model = configuredModel(config)
    },
    "chat.headers": async (input, output) => {
      output.headers["x-agent-harness"] = "opencode"
      output.headers["x-tao-session"] = input.sessionID
      output.headers["x-agent-workflow-id"] = workflows.get(input.sessionID) ?? input.sessionID
      await reporter.flush(input.sessionID)
    },
    "tool.execute.before": async (input, output) => {
      running.set(input.callID, { sessionID: input.sessionID, started: Date.now() })
      const args = (output.args ?? {}) as Record<string, unknown>
      const program = input.tool === "bash" && typeof args.command === "string" ? programOf(args.command) : undefined
      const tool_start = { call_id: input.callID, tool: input.tool, hints: toolHints(input.tool, args), program }
      reporter.send(input.sessionID, [{ kind: "tool_start", session_id: input.sessionID, tool_start }])
    },
    "tool.execute.after": async (input, output) => {
      end(input.callID, afterStatus(input.tool, output))
    },
    event: async ({ event }) => {
      if (event.type === "session.created") {
        const { id, parentID } = event.properties.info
        const labels = parentID ? { parent: parentID } : {}
        const workflow_id = parentID ? (workflows.get(parentID) ?? parentID) : id
        workflows.set(id, workflow_id)
        const lineage = { workflow_id, ...(parentID ? { parent_session_id: parentID } : {}) }
        const context = { harness: "opencode", client_session_id: id, labels, ...lineage, ...(model ? { model } : {}) }
        reporter.send(id, [{ kind: "register", session_id: id, registration: { context } }])
      } else if (event.type === "session.idle") {
        reporter.send(event.properties.sessionID, [{ kind: "close", session_id: event.properties.sessionID }])
      } else if (event.type === "session.deleted") {
        workflows.delete(event.properties.info.id)
        reporter.send(event.properties.info.id, [{ kind: "close", session_id: event.properties.info.id }])
      } else if (event.type === "message.part.updated") {
        const part = event.properties.part
        if (part.type === "tool" && part.state.status === "error") {
          end(part.callID, "error", (part.state.time.end - part.state.time.start) / 1000)
        }
      }
    },
    dispose: async () => {
      await reporter.flush()
    },
  }
}
