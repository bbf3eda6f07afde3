import Foundation
import NIOHTTP1
import RoundupClient
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

@testable import RoundupTrello

/// OpenTelemetry traces: one webhook's path through the real ingress and worker, exported over
/// OTLP/HTTP (JSON) to a collector on loopback, found as spans and links; and the rules of the trace context a message
/// carries.
@Suite(.serialized) struct TracingTests {
    static let otel = ["OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_BSP_SCHEDULE_DELAY": "100"]

    @Test func oneWebhooksPathIsOneTraceAndItsLinkAcrossTheProcesses() async throws {
        let collector = try await FakeCollector.start()
        let stack = try await Stack(store: .sqlite)
        let e2e = EndToEndTests()
        let (store, account) = try await e2e.seed(stack)
        stack.trello.setCard(FakeTrello.card(id: "TC1", listID: "L1", boardID: "B1", name: "Traced card secret-free", desc: "private notes"))
        // The card read fails once: the retry is a second client span, and its log line carries the trace.
        stack.trello.failNextCardRequests(status: 503, count: 1)
        var otel = Self.otel
        otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        // A device to wake: the batch's push goes through the pusher to a fake APNs.
        let deviceToken = PusherTests.deviceToken(7)
        _ = try await store.upsertDevice(accountID: account, deviceID: "iphone", apnsToken: deviceToken, platform: .ios, environment: .production)
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns, extra: otel)
        let worker = try await stack.startWorker(name: "w1", extra: otel.merging(["LOG_LEVEL": "debug"]) { $1 })
        try await stack.startIngress(extra: otel)
        let path = try await stack.webhookPath(account: account)
        let body = WebhookBodies.body(type: "createCard", actionID: "ACT-TRACED", cardID: "TC1", listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: path, body: body, secret: EndToEndTests.secret).status == .ok)
        #expect(try await TestSupport.eventually { try await store.pendingChanges(accountID: account, afterID: 0, limit: 10).count == 1 })

        // Every span of the path, exported within the batch delay.
        let exported = await TestSupport.eventually(timeout: .seconds(15)) {
            let spans = collector.spans
            return spans.contains { $0.name == "process webhooks" } && spans.contains { $0.name == "apply observations" }
                && spans.contains { $0.kind == 2 } && spans.contains { $0.name == "POST /3/device/{token}" }
        }
        try #require(exported, "spans: \(collector.spans)")
        let spans = collector.spans
        #expect(collector.requestLog.allSatisfy { $0.hasPrefix("POST /v1/traces application/json") }, "\(collector.requestLog)")

        // The ingress: a server span per delivery (the route, never the path), and its enqueue as a producer span.
        let server = try #require(spans.first { $0.service == "roundup-ingress" && $0.kind == 2 })
        #expect(server.name == "POST /dailyroundup/webhook/trello/{account}" && server.parentSpanID.isEmpty)
        #expect(server.attributes["http.route"] == "/dailyroundup/webhook/trello/{account}")
        #expect(server.attributes["http.response.status_code"] == "200" && server.attributes["http.request.method"] == "POST")
        let producer = try #require(spans.first { $0.service == "roundup-ingress" && $0.kind == 4 })
        #expect(producer.traceID == server.traceID && producer.parentSpanID == server.spanID)
        #expect(producer.attributes["messaging.system"] == "redis" && producer.attributes["messaging.operation.type"] == "send")
        #expect(producer.attributes["roundup.trello.action.id"] == "ACT-TRACED")
        let entryID = try #require(producer.attributes["messaging.message.id"])

        // The worker: its batch a consumer span linked to the enqueue (the entry carried its context), the Trello
        // reads and the store's write its children.
        let batch = try #require(spans.first { $0.service == "roundup-worker" && $0.name == "process webhooks" })
        #expect(batch.kind == 5 && batch.parentSpanID.isEmpty)
        let link = try #require(batch.links.first { $0.spanID == producer.spanID }, "links: \(batch.links)")
        #expect(link.traceID == server.traceID && link.attributes["roundup.trello.action.id"] == "ACT-TRACED")
        #expect(link.attributes["messaging.message.id"]?.hasSuffix(entryID) == true)
        let reads = spans.filter { $0.service == "roundup-worker" && $0.name == "GET /1/cards/{id}" }
        #expect(reads.count == 2, "the failed read and its retry: \(reads)")
        #expect(reads.allSatisfy { $0.kind == 3 && $0.traceID == batch.traceID && $0.parentSpanID == batch.spanID })
        #expect(Set(reads.compactMap { $0.attributes["http.response.status_code"] }) == ["503", "200"])
        #expect(reads.contains { $0.statusCode == 2 && $0.attributes["error.type"] == "503" })
        let apply = try #require(spans.first { $0.name == "apply observations" })
        // Only ours: the HTTP client's own spans (with the full URL and query) are off.
        #expect(!spans.contains { $0.attributes["url.full"] != nil || $0.attributes["url.query"] != nil })
        #expect(apply.traceID == batch.traceID && apply.parentSpanID == batch.spanID && apply.attributes["roundup.observations"] == "1")

        // The pusher: the batch's push, a consumer span linked to the batch, the APNs send its child.
        #expect(apns.delivered.count == 1)
        let push = try #require(spans.first { $0.service == "roundup-pusher" && $0.name == "process push" })
        #expect(push.kind == 5 && push.links.contains { $0.traceID == batch.traceID && $0.spanID == batch.spanID }, "\(push.links)")
        #expect(push.attributes["roundup.push.kind"] == "background" && push.attributes["roundup.push.reason"] == "changes")
        let send = try #require(spans.first { $0.name == "POST /3/device/{token}" })
        #expect(send.kind == 3 && send.traceID == push.traceID && send.parentSpanID == push.spanID && send.service == "roundup-pusher")

        // Nothing secret and nothing of the card in any attribute: no credential, no webhook secret, no callback
        // token or account id, no title or notes.
        let token = String(path.split(separator: "/").last ?? "")
        let values = spans.flatMap { span in Array(span.attributes.values) + span.links.flatMap { Array($0.attributes.values) } + [span.name] }
        for secret in ["test-token", "test-api-key", EndToEndTests.secret, token, account, "Traced card", "private notes", deviceToken] {
            #expect(!values.contains { $0.contains(secret) }, "\(secret) in an attribute")
        }
        // The worker's log line written inside the batch (the retry) names its trace and span.
        let retryLine = try #require(worker.output.split(separator: "\n").first { $0.contains("trello request retry") }, "\(worker.output)")
        #expect(retryLine.contains(batch.traceID), "\(retryLine)")
        await stack.shutdown()
        await apns.stop()
        await collector.stop()
    }

    /// A change the worker wrote wakes the account's open change stream on the API: that wake-up is a span of the API
    /// linked to the worker's batch.
    @Test func aChangeStreamsWakeUpIsLinkedToTheBatchThatWroteTheChange() async throws {
        let collector = try await FakeCollector.start()
        let stack = try await Stack(store: .sqlite)
        var otel = Self.otel
        otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        try await stack.startIngress(extra: otel)
        try await stack.startWorker(name: "w1", extra: otel)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: otel)
        let s = try await SyncSetup.make(stack, list: "Ltrace", board: "Btrace")
        let stream = try await ChangeStreamTests().open(stack, token: s.token)
        try await Task.sleep(for: .milliseconds(300))
        stack.trello.userCreateCard(listID: "Ltrace", name: "Woken")
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { stream.events.count == 1 })
        let linked = await TestSupport.eventually(timeout: .seconds(10)) {
            let spans = collector.spans
            return spans.contains { wake in
                wake.service == "roundup-api" && wake.name == "wake change streams"
                    && wake.links.contains { link in
                        spans.contains { $0.name == "process webhooks" && $0.traceID == link.traceID && $0.spanID == link.spanID }
                    }
            }
        }
        #expect(linked, "\(collector.spans)")
        await stream.close()
        await stack.shutdown()
        await collector.stop()
    }

    /// An app that sends its `traceparent` on `/sync` finds the job in its own trace: the worker's job span continues
    /// it, the Trello write its child; a `traceparent` that is not one is ignored (the job starts a trace of its own).
    @Test func anAppsSyncIsContinuedByItsJob() async throws {
        let collector = try await FakeCollector.start()
        let stack = try await Stack(store: .sqlite)
        var otel = Self.otel
        otel["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.url
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: otel)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Ljob", board: "Bjob")
        let appTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        // The app's own client, as an app posts its edits with its trace context.
        let client = RoundupClient(serverURL: URL(string: "http://127.0.0.1:\(stack.apiPort)")!, token: s.token, transport: ClientTests.transport)
        let started = try await client.submitSync(
            deviceID: "iphone-1",
            changes: [.init(op: .create, syncListId: s.listID, reminderId: "r-traced", fields: .init(title: "From the app"), modifiedAt: Date())],
            idempotencyKey: RoundupClient.makeIdempotencyKey(), traceparent: appTrace)
        let continued = await TestSupport.eventually(timeout: .seconds(15)) {
            collector.spans.contains { $0.name == "run job" } && collector.spans.contains { $0.name == "POST /1/cards" }
        }
        try #require(continued, "\(collector.spans)")
        let job = try #require(collector.spans.first { $0.name == "run job" })
        #expect(job.service == "roundup-worker" && job.kind == 5)
        #expect(job.traceID == "0af7651916cd43dd8448eb211c80319c" && job.parentSpanID == "b7ad6b7169203331")
        #expect(job.attributes["roundup.job.kind"] == "sync" && job.attributes["roundup.job.id"] == started.jobId)
        let write = try #require(collector.spans.first { $0.name == "POST /1/cards" })
        #expect(write.traceID == job.traceID && write.parentSpanID == job.spanID && write.kind == 3)

        // Not a traceparent: no context carried, the job's span is a root of its own.
        // (The first job has ended: its span was exported.)
        let forged = JSONValue.object([
            "device_id": "iphone-1", "changes": .array([s.change("create", reminder: "r-plain", fields: ["title": "Untraced"])]),
        ]).canonicalJSON
        let plain = try await stack.callAPI(
            .POST, "/dailyroundup/sync", token: s.token, body: forged, headers: ["traceparent": "00-not-a-trace-00"])
        #expect(plain.status == .accepted, "\(plain.body)")
        let second = await TestSupport.eventually(timeout: .seconds(15)) { collector.spans.filter { $0.name == "run job" }.count == 2 }
        #expect(second)
        let root = try #require(collector.spans.last { $0.name == "run job" })
        #expect(root.parentSpanID.isEmpty && root.traceID != job.traceID)
        await stack.shutdown()
        await collector.stop()
    }

    /// Without an endpoint nothing is traced: the entry carries no context, the processes export nothing.
    @Test func withoutAnEndpointNothingIsTracedAndNoEntryCarriesAContext() async throws {
        #expect(!RoundupTracing.isConfigured([:]))
        #expect(!RoundupTracing.isConfigured(["OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"]))
        #expect(RoundupTracing.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"]))
        #expect(RoundupTracing.isConfigured(["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"]))
        #expect(!RoundupTracing.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"]))
        #expect(!RoundupTracing.isConfigured(["OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"]))

        let stack = try await Stack(store: .sqlite)
        let (_, account) = try await EndToEndTests().seed(stack)
        try await EndToEndTests().publish(stack, account: account)
        try await stack.startIngress()
        let body = WebhookBodies.body(type: "createCard", actionID: "ACT-PLAIN", cardID: "TC2", listID: "L1", boardID: "B1")
        #expect(try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: EndToEndTests.secret).status == .ok)
        let entries = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.webhookStream(WebhookShard(account: account))), "-", "+")
            .streamEntries
        #expect(entries.count == 1 && entries.first?.fields["traceparent"] == nil && entries.first?.fields["account"] != nil)
        await stack.shutdown()
    }

    /// A message's context: only a valid `traceparent` makes one (what a client sends cannot put anything else in a
    /// message), a long or unprintable `tracestate` is dropped, and both survive a message's round trip.
    @Test func onlyAValidTraceparentMakesAContext() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        #expect(TraceHeaders(traceparent: valid)?.traceID == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(TraceHeaders(traceparent: valid)?.spanID == "00f067aa0ba902b7")
        for bad in [
            "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\nx",
        ] {
            #expect(TraceHeaders(traceparent: bad) == nil, "\(bad)")
        }
        #expect(TraceHeaders(traceparent: valid, tracestate: "vendor=1")?.tracestate == "vendor=1")
        #expect(TraceHeaders(traceparent: valid, tracestate: String(repeating: "a", count: 513))?.tracestate == nil)
        #expect(TraceHeaders(traceparent: valid, tracestate: "a=\u{1}")?.tracestate == nil)

        let event = WebhookEvent(
            account: "acc", actionID: "A", type: "createCard", model: "L1", receivedMilliseconds: 1, body: Array("{}".utf8),
            trace: TraceHeaders(traceparent: valid, tracestate: "vendor=1"))
        let fields = Dictionary(event.fields.map { ($0.name, $0.value) }) { $1 }
        #expect(WebhookEvent(fields: fields) == event)
        // A dead letter's replay puts the context back with the event's other fields.
        #expect(WebhookEvent.fieldNames.contains("traceparent") && WebhookEvent.fieldNames.contains("tracestate"))
    }

    /// A Trello request's span is named by its route: ids as `{id}`, the API's words kept, no query.
    @Test func trelloRequestsAreNamedByTheirRoute() {
        #expect(TrelloClient.template("/cards/5f1e2d3c4b5a69788796a5b4?fields=all") == "/1/cards/{id}")
        #expect(TrelloClient.template("/cards/c1/checkItem/ci2") == "/1/cards/{id}/checkItem/{id}")
        #expect(TrelloClient.template("/lists/L1/cards") == "/1/lists/{id}/cards")
        #expect(TrelloClient.template("/boards/abcdefabcdefabcdefabcdef/customFields") == "/1/boards/{id}/customFields")
    }
}
