// The TypeScript SDK 2.x client (@modelcontextprotocol/client) over Streamable HTTP. The plan's
// options.mode is its versionNegotiation mode: "auto" probes with server/discover and settles on
// the stateless 2026-07-28 revision when the server speaks it; "legacy" (its default) initializes
// a 2025 session.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { describe, emit, readArgs, runSteps } from "./plan.mjs";

const { url, headers, plan } = readArgs();
const mode = plan.options?.mode ?? "auto";
const client = new Client({ name: "remember-sync-conformance", version: "1.0.0" },
                          { versionNegotiation: { mode } });
const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
try {
  await client.connect(transport);
  emit({ op: "connect", protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
         era: client.getProtocolEra() ?? null, server: client.getServerVersion()?.name ?? null });
  await runSteps(client, plan.steps);
} catch (error) {
  emit({ op: "connect", error: describe(error) });
} finally {
  await client.close();
}
