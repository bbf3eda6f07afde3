import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// A corpus of bad and odd webhook deliveries against the real ingress: every one gets a clear 4xx (or the
/// documented 200 for a redelivery or an unhandled type), none a 5xx, and nothing rejected reaches the stream.
@Suite(.serialized) struct IngressBadInputTests {
    struct Case {
        var name: String
        var method: HTTPMethod = .POST
        var path: String? = nil
        var body: [UInt8]
        var signature: Signature = .valid
        var headers: [String: String] = [:]
        var expect: HTTPResponseStatus
        var enqueues = false

        enum Signature {
            case valid, none, value(String), secret(String), url(String)
        }
    }

    @Test func corpus() async throws {
        let stack = try await Stack()
        let e2e = EndToEndTests()
        let (_, account) = try await e2e.seed(stack)
        let (_, other) = (0, try await stackAccount(stack))
        try await e2e.publish(stack, account: account)
        try await stack.startIngress()
        let path = "/dailyroundup/webhook/trello/\(account)"
        func body(_ id: String, type: String = "updateCard") -> [UInt8] {
            WebhookBodies.body(type: type, actionID: id, cardID: "C1", listID: "L1", boardID: "B1", card: ["name": "x"], old: ["name": "y"])
        }
        func raw(_ text: String) -> [UInt8] { Array(text.utf8) }
        let valid = body("ok-1")
        let nested = String(repeating: "[", count: 50_000) + String(repeating: "]", count: 50_000)
        let hugeArray = #"{"model":{"id":"L1"},"list":["# + String(repeating: "1,", count: 400_000) + #"1]}"#
        var cases: [Case] = [
            Case(name: "missing signature", body: valid, signature: .none, expect: .unauthorized),
            Case(name: "empty signature", body: valid, signature: .value(""), expect: .unauthorized),
            Case(name: "wrong signature", body: valid, signature: .value("AAAAAAAAAAAAAAAAAAAAAAAAAAA="), expect: .unauthorized),
            Case(name: "not base64", body: valid, signature: .value("!!!not base64!!!"), expect: .unauthorized),
            Case(name: "truncated signature", body: valid, signature: .value("gk+lIq3ZVA4LNMPC"), expect: .unauthorized),
            Case(name: "10 KB signature", body: valid, signature: .value(String(repeating: "A", count: 10_000)), expect: .unauthorized),
            Case(name: "another account's secret", body: valid, signature: .secret("someone-elses-secret"), expect: .unauthorized),
            Case(name: "signed for a trailing slash", body: valid, signature: .url(stack.publicURL + path + "/"), expect: .unauthorized),
            Case(
                name: "signed for https", body: valid, signature: .url(stack.publicURL.replacingOccurrences(of: "http:", with: "https:") + path),
                expect: .unauthorized),
            Case(name: "signed for a query string", body: valid, signature: .url(stack.publicURL + path + "?x=1"), expect: .unauthorized),
            Case(
                name: "signed for another account's path", body: valid, signature: .url(stack.publicURL + "/dailyroundup/webhook/trello/\(other)"),
                expect: .unauthorized),
            Case(name: "not JSON", body: raw("<html>hello</html>"), expect: .badRequest),
            Case(name: "empty body", body: [], expect: .badRequest),
            Case(name: "JSON array", body: raw("[1,2,3]"), expect: .badRequest),
            Case(name: "JSON string", body: raw("\"action\""), expect: .badRequest),
            Case(name: "JSON null", body: raw("null"), expect: .badRequest),
            Case(name: "no action", body: raw(#"{"model":{"id":"L1"}}"#), expect: .badRequest),
            Case(name: "action null", body: raw(#"{"action":null,"model":{"id":"L1"}}"#), expect: .badRequest),
            Case(name: "action a string", body: raw(#"{"action":"createCard"}"#), expect: .badRequest),
            Case(name: "truncated JSON", body: Array(valid.prefix(valid.count / 2)), expect: .badRequest),
            Case(name: "trailing garbage", body: valid + raw("}}"), expect: .badRequest),
            Case(
                name: "invalid UTF-8",
                body: raw(#"{"action":{"id":"u1","type":"updateCard","data":{"card":{"id":"C1","name":""#) + [0xC3, 0x28, 0xFF] + raw(#""}}}}"#),
                expect: .badRequest),
            Case(name: "NUL in a string", body: raw(#"{"action":{"id":"n1","type":"updateCard","x":""#) + [0] + raw(#""}}"#), expect: .badRequest),
            Case(name: "50,000 levels deep", body: raw(#"{"action":"# + nested + "}"), expect: .badRequest),
            Case(name: "800 KB array, no action", body: raw(hugeArray), expect: .badRequest),
            Case(name: "over 1 MiB", body: [UInt8](repeating: 0x20, count: (1 << 20) + 1), expect: .payloadTooLarge),
            Case(name: "action without id", body: raw(#"{"action":{"type":"updateCard"},"model":{"id":"L1"}}"#), expect: .badRequest),
            Case(name: "action with empty id", body: raw(#"{"action":{"id":"","type":"updateCard"},"model":{"id":"L1"}}"#), expect: .badRequest),
            // not a handled type: ignored
            Case(name: "type a number", body: raw(#"{"action":{"id":"t9","type":7},"model":{"id":"L1"}}"#), expect: .ok),
            Case(name: "unhandled type", body: body("vote-1", type: "voteOnCard"), expect: .ok),
            Case(name: "comment", body: body("comment-1", type: "commentCard"), expect: .ok),
            Case(name: "unknown account", path: "/dailyroundup/webhook/trello/no-such-account", body: valid, expect: .notFound),
            Case(name: "extra path segment", path: path + "/more", body: valid, expect: .notFound),
            Case(name: "empty token segment", path: path + "/", body: valid, expect: .notFound),
            Case(name: "three path segments", path: path + "/" + String(repeating: "a", count: 64) + "/x", body: valid, expect: .notFound),
            Case(
                name: "empty account segment", path: "/dailyroundup/webhook/trello//" + String(repeating: "a", count: 64), body: valid,
                expect: .notFound),
            Case(name: "upper-case account id", path: "/dailyroundup/webhook/trello/" + account.uppercased(), body: valid, expect: .notFound),
            Case(name: "other path", path: "/dailyroundup/webhook/github", body: valid, expect: .notFound),
            Case(name: "GET", method: .GET, body: [], signature: .none, expect: .methodNotAllowed),
            Case(name: "PUT", method: .PUT, body: valid, expect: .methodNotAllowed),
            Case(name: "DELETE", method: .DELETE, body: [], signature: .none, expect: .methodNotAllowed),
            Case(
                name: "model path without model", path: "/dailyroundup/webhook/trello", body: raw(#"{"action":{"id":"m1","type":"updateCard"}}"#),
                expect: .badRequest),
            Case(
                name: "model nobody watches", path: "/dailyroundup/webhook/trello",
                body: raw(#"{"action":{"id":"m2","type":"updateCard"},"model":{"id":"ZZZ"}}"#), expect: .notFound),
            Case(name: "text/plain but signed", body: body("ct-1"), headers: ["content-type": "text/plain"], expect: .ok, enqueues: true),
            Case(name: "first delivery", body: body("replay-1"), expect: .ok, enqueues: true),
            Case(name: "replay", body: body("replay-1"), expect: .ok),
            Case(
                name: "replay, other path", path: "/dailyroundup/webhook/trello", body: body("replay-1"),
                signature: .url(stack.publicURL + "/dailyroundup/webhook/trello"), expect: .ok),
        ]
        cases.append(Case(name: "valid", body: valid, expect: .ok, enqueues: true))
        #expect(cases.count >= 40)

        var expectedEnqueued = 0
        for c in cases {
            let target = c.path ?? path
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(stack.ingressPort)\(target)")
            request.method = c.method
            request.headers.add(name: "content-type", value: c.headers["content-type"] ?? "application/json")
            switch c.signature {
            case .valid:
                request.headers.add(
                    name: "x-trello-webhook",
                    value: TrelloSignature.sign(secret: EndToEndTests.secret, body: c.body, callbackURL: stack.publicURL + target))
            case .none: break
            case .value(let v): request.headers.add(name: "x-trello-webhook", value: v)
            case .secret(let s):
                request.headers.add(
                    name: "x-trello-webhook", value: TrelloSignature.sign(secret: s, body: c.body, callbackURL: stack.publicURL + target))
            case .url(let u):
                request.headers.add(name: "x-trello-webhook", value: TrelloSignature.sign(secret: EndToEndTests.secret, body: c.body, callbackURL: u))
            }
            if !c.body.isEmpty { request.body = .bytes(ByteBuffer(bytes: c.body)) }
            let response = try await stack.http.execute(request, timeout: .seconds(10))
            let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
            #expect(response.status == c.expect, "\(c.name): \(response.status) \(text)")
            #expect(response.status.code < 500, "\(c.name)")
            if response.status.code >= 400 {
                #expect((try? JSONParser.parse(Array(text.utf8)))?["error"]?["code"]?.stringValue != nil, "\(c.name): \(text)")
            }
            if c.enqueues { expectedEnqueued += 1 }
            #expect(try await stack.streamLength() == expectedEnqueued, "\(c.name)")
        }
        #expect(stack.ingress?.isRunning == true)
        await stack.shutdown()
    }

    /// A second account with its own secret, for the cross-account cases.
    func stackAccount(_ stack: Stack) async throws -> String {
        let other = "other-account"
        _ = try await stack.redis.send("HSET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(other), "someone-elses-secret")
        return other
    }
}
