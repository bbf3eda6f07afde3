import Foundation
import NIOHTTP1
import RoundupAPI
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// roundup-api as the apps use it: the real process over loopback, with the real ingress and worker,
/// a real redis-server, a real SQLite file and a fake Trello that checks callback URLs with HEAD.
@Suite(.serialized) struct APITests {
    static let bootstrap = "bootstrap-0123456789abcdef"

    func createAccount(_ stack: Stack) async throws -> (account: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Self.bootstrap)
        #expect(created.status == .created)
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        return (account, token)
    }

    @Test(arguments: StoreBackend.available) func theFiveStepSetUpThenAWebhookArrivesAsAChange(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: Self.bootstrap)

        // 1. Account.
        let (account, token) = try await createAccount(stack)
        #expect(token.count >= 43)
        // 2. Changes: none yet.
        let empty = try await stack.callAPI(.GET, "/dailyroundup/changes", token: token)
        #expect(empty.status == .ok)
        #expect(empty.json["changes"] == .array([]) && empty.json["has_more"] == .bool(false))
        #expect(Timestamp.date(empty.json["server_time"]?.stringValue ?? "") != nil)
        // 3. Key and webhook secret; 4. token. Masked every time.
        let secret = "webhook-secret-0123456789"
        let step3 = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token, body: #"{"trello_api_key":"test-api-key","trello_webhook_secret":"\#(secret)"}"#)
        #expect(step3.status == .ok)
        #expect(!step3.body.contains("test-api-key") && !step3.body.contains(secret))
        #expect(step3.json["trello_webhook_secret"]?.stringValue?.hasSuffix("6789") == true)
        #expect(try await stack.redis.send("HGET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account)).string == secret)
        let step4 = try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{"trello_token":"test-token"}"#)
        #expect(step4.status == .ok && !step4.body.contains("test-token"))
        #expect(step4.json["trello_token"]?.stringValue != nil)
        // 5. Pair a list: two webhooks, each checked by Trello with HEAD against the real ingress.
        stack.trello.addList(id: "L1", boardID: "B1")
        let list = try await stack.callAPI(
            .POST, "/dailyroundup/lists", token: token, body: #"{"name":"Groceries","trello_board_id":"B1","trello_list_id":"L1"}"#)
        #expect(list.status == .created, "\(list.body)")
        let listID = try #require(list.json["sync_list_id"]?.stringValue)
        #expect(list.json["trello_list_id"] == "L1" && list.json["trello_board_id"] == "B1" && list.json["name"] == "Groceries")
        let hooks = stack.trello.webhooks
        #expect(Set(hooks.map(\.idModel)) == ["L1", "B1"])
        // The account's own callback URL, with its token (what the ingress trusts without asking Trello).
        let ownPath = try await stack.webhookPath(account: account)
        #expect(hooks.allSatisfy { $0.callbackURL == stack.publicURL + ownPath })
        #expect(try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute("L1")), RedisArgument(account)) == .integer(1))

        // Three cards created in Trello, delivered as signed webhooks.
        for i in 1...3 {
            stack.trello.setCard(FakeTrello.card(id: "C\(i)", listID: "L1", boardID: "B1", name: "Card \(i)"))
            let body = WebhookBodies.body(type: "createCard", actionID: "A\(i)", cardID: "C\(i)", listID: "L1", boardID: "B1")
            #expect(try await stack.postWebhook(path: ownPath, body: body, secret: secret).status == .ok)
        }
        let arrived = try await TestSupport.eventually {
            try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"]?.arrayValue?.count == 3
        }
        #expect(arrived)
        // Paged with after_id.
        let page1 = try await stack.callAPI(.GET, "/dailyroundup/changes?limit=2", token: token)
        let first = try #require(page1.json["changes"]?.arrayValue)
        #expect(first.count == 2 && page1.json["has_more"] == .bool(true))
        #expect(first[0]["change_type"] == "create" && first[0]["sync_list_id"]?.stringValue == listID && first[0]["reminder_id"] == .null)
        #expect(first[0]["fields"]?["title"] == "Card 1")
        let lastID = try #require(first[1]["id"].flatMap { if case .number(let n) = $0 { Int(n) } else { nil } })
        let page2 = try await stack.callAPI(.GET, "/dailyroundup/changes?after_id=\(lastID)&limit=2", token: token)
        #expect(page2.json["changes"]?.arrayValue?.count == 1 && page2.json["has_more"] == .bool(false))

        // Ack the first create with the reminder the app made; then the rest in one call.
        let firstNumber: Double? = first[0]["id"].flatMap { if case .number(let n) = $0 { return n } else { return nil } }
        let firstID = Int(firstNumber ?? 0)
        let ack = try await stack.callAPI(.POST, "/dailyroundup/changes/\(firstID)/ack", token: token, body: #"{"reminder_id":"R-1"}"#)
        #expect(ack.status == .ok)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/changes/\(firstID)/ack", token: token).status == .ok)  // again: idempotent
        let rest = try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"]?.arrayValue ?? []
        #expect(rest.count == 2)
        let ids = rest.compactMap { $0["id"] }.map { $0.canonicalJSON }.joined(separator: ",")
        #expect(try await stack.callAPI(.POST, "/dailyroundup/changes/ack", token: token, body: #"{"ids":[\#(ids)]}"#).status == .ok)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"] == .array([]))

        // A later edit of card 1 carries the mapping recorded by the ack.
        let rename = WebhookBodies.body(
            type: "updateCard", actionID: "A9", cardID: "C1", listID: "L1", boardID: "B1",
            card: ["name": "Card one"], old: ["name": "Card 1"], date: "2030-01-01T00:00:00.000Z")
        #expect(try await stack.postWebhook(path: ownPath, body: rename, secret: secret).status == .ok)
        let renamed = try await TestSupport.eventually {
            try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"]?.arrayValue?.count == 1
        }
        #expect(renamed)
        let update = try #require(try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"]?.arrayValue?.first)
        #expect(update["change_type"] == "update" && update["reminder_id"] == "R-1" && update["changed_fields"] == .array(["title"]))

        // Deleting the list removes its webhooks at Trello and its routes.
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(listID)", token: token).status == .noContent)
        #expect(stack.trello.webhooks.isEmpty)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: token).json["changes"] == .array([]))
        #expect(try await stack.redis.send("SISMEMBER", RedisArgument(stack.keys.modelRoute("L1")), RedisArgument(account)) == .integer(0))
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func listPairingFailuresLeaveNothingBehind(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)  // no ingress: Trello's HEAD check will fail
        let (account, token) = try await createAccount(stack)
        stack.trello.addList(id: "L1", boardID: "B1")
        stack.trello.addList(id: "L2", boardID: "B1")
        let pair = #"{"name":"Groceries","trello_board_id":"B1","trello_list_id":"L1"}"#
        let missing = try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: pair)
        #expect(missing.status == .conflict)
        #expect(missing.body.contains("trello_api_key") && missing.body.contains("trello_token") && missing.body.contains("trello_webhook_secret"))
        _ = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token,
            body: #"{"trello_api_key":"test-api-key","trello_token":"test-token","trello_webhook_secret":"whsec-0123456789"}"#)
        let refused = try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: pair)
        #expect(refused.status == .badGateway)
        #expect(refused.body.contains("did not return 200"))
        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists", token: token).json["lists"] == .array([]))
        #expect(stack.trello.webhooks.isEmpty)
        // With the ingress up the same request works, and a second pairing of the list is a conflict.
        try await stack.startIngress()
        #expect(try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: pair).status == .created)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: pair).status == .conflict)
        // A second list on the same board shares the board webhook.
        #expect(
            try await stack.callAPI(
                .POST, "/dailyroundup/lists", token: token, body: #"{"name":"Errands","trello_board_id":"B1","trello_list_id":"L2"}"#
            ).status == .created)
        #expect(stack.trello.webhooks.map(\.idModel).sorted() == ["B1", "L1", "L2"])
        // Deleting the account deletes every webhook, and an operator's pause of it.
        try await StreamPauses(redis: stack.redis, keys: stack.keys).pause(account: account)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/account", token: token).status == .noContent)
        #expect(stack.trello.webhooks.isEmpty)
        #expect(try await StreamPauses(redis: stack.redis, keys: stack.keys).pausedAccounts().isEmpty, "the account's pause cleared")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: token).status == .unauthorized)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func accountsAreIsolated(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)
        let (a, tokenA) = try await createAccount(stack)
        let (_, tokenB) = try await createAccount(stack)
        // Give A a list, a pending change and a device, straight in the store the API reads.
        let store = try await stack.store()
        let list = try await store.createSyncList(accountID: a, name: "A's", trelloBoardID: "BA", trelloListID: "LA")
        _ = try await store.apply([
            CardObservation(
                accountID: a, syncListID: list.id, cardID: "CA", actionID: "X", actionDate: Date(),
                kind: .fields(["title": "secret plans"], full: true))
        ])
        let change = try #require(try await store.pendingChanges(accountID: a, afterID: 0, limit: 1).first)
        #expect(
            try await stack.callAPI(
                .POST, "/dailyroundup/devices", token: tokenA,
                body: #"{"device_id":"phone-a","apns_token":"\#(String(repeating: "ab", count: 32))","platform":"ios","environment":"sandbox"}"#
            ).status == .created)

        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists/\(list.id)", token: tokenB).status == .notFound)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(list.id)", token: tokenB).status == .notFound)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/lists", token: tokenB).json["lists"] == .array([]))
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: tokenB).json["changes"] == .array([]))
        #expect(try await stack.callAPI(.POST, "/dailyroundup/changes/\(change.id)/ack", token: tokenB).status == .notFound)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/changes/ack", token: tokenB, body: #"{"ids":[\#(change.id)]}"#).status == .notFound)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/devices/phone-a", token: tokenB).status == .notFound)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/devices", token: tokenB).json["devices"] == .array([]))
        // A's data is untouched.
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: tokenA).json["changes"]?.arrayValue?.count == 1)
        // Answered though Trello cannot be asked (the account has no credentials): why, and no labels.
        let listOfA = try await stack.callAPI(.GET, "/dailyroundup/lists/\(list.id)", token: tokenA)
        #expect(listOfA.status == .ok)
        #expect(listOfA.json["vocabulary_error"]?.stringValue?.contains("credentials") == true && listOfA.json["labels"] == nil, "\(listOfA.body)")
        #expect(listOfA.json["priority_options"] == .array([]))
        #expect(try await stack.callAPI(.GET, "/dailyroundup/devices", token: tokenA).json["devices"]?.arrayValue?.count == 1)

        // A rotated token stops working at once; a deleted account's token too.
        let rotated = try await stack.callAPI(.POST, "/dailyroundup/account/token", token: tokenA)
        let newA = try #require(rotated.json["auth_token"]?.stringValue)
        #expect(newA != tokenA)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: tokenA).status == .unauthorized)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: newA).status == .ok)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/account", token: tokenB).status == .noContent)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/changes", token: tokenB).status == .unauthorized)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func devicesRegisterUpdateAndDelete(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.bootstrap)
        let (_, token) = try await createAccount(stack)
        let apns = String(repeating: "0f", count: 32)
        let body = #"{"device_id":"mac-1","apns_token":"\#(apns)","platform":"macos","environment":"production"}"#
        let created = try await stack.callAPI(.POST, "/dailyroundup/devices", token: token, body: body)
        #expect(created.status == .created)
        #expect(!created.body.contains(apns) && created.json["apns_token"]?.stringValue?.hasSuffix("0f0f") == true)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/devices", token: token, body: body).status == .ok)
        let bad = try await stack.callAPI(
            .POST, "/dailyroundup/devices", token: token,
            body: #"{"device_id":"x","apns_token":"zz","platform":"android","environment":"production"}"#)
        #expect(bad.status == .unprocessableEntity)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/devices/mac-1", token: token).status == .noContent)
        #expect(try await stack.callAPI(.DELETE, "/dailyroundup/devices/mac-1", token: token).status == .notFound)
        #expect(try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: token).json["conflicts"] == .array([]))
        #expect(try await stack.callAPI(.GET, "/dailyroundup/duplicates", token: token).json["duplicates"] == .array([]))
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func badInputGetsClearErrorsAndSecretsStayMasked(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: Self.bootstrap, extra: ["ROUNDUP_API_RATE_LIMIT": "40"])
        #expect(try await stack.callAPI(.POST, "/dailyroundup/account", token: "wrong-bootstrap-token-000").status == .unauthorized)
        #expect(try await stack.callAPI(.POST, "/dailyroundup/account", token: nil).status == .unauthorized)
        let (_, token) = try await createAccount(stack)
        func expectError(_ response: Stack.Response, _ status: HTTPResponseStatus, _ code: String, mentioning: String? = nil, _ line: Int = #line) {
            #expect(response.status == status, "line \(line): \(response.body)")
            #expect(response.json["error"]?["code"]?.stringValue == code, "line \(line): \(response.body)")
            if let mentioning {
                #expect(response.json["error"]?["message"]?.stringValue?.contains(mentioning) == true, "line \(line): \(response.body)")
            }
        }
        expectError(try await stack.callAPI(.GET, "/dailyroundup/changes", token: nil), .unauthorized, "unauthorized")
        expectError(try await stack.callAPI(.GET, "/dailyroundup/changes", token: "rt_nope"), .unauthorized, "unauthorized")
        expectError(try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: "{not json"), .badRequest, "invalid_json")
        expectError(
            try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{"trello_token": 42}"#), .badRequest, "bad_request",
            mentioning: "trello_token")
        expectError(
            try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{"conflict_policy":"coin_flip"}"#), .unprocessableEntity,
            "unprocessable", mentioning: "conflict_policy")
        expectError(try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{}"#), .unprocessableEntity, "unprocessable")
        expectError(
            try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: #"{"trello_token":"x"}"#, contentType: "text/plain"),
            .unsupportedMediaType, "unsupported_media_type")
        let huge = #"{"trello_token":""# + String(repeating: "x", count: (1 << 20) + 10) + #""}"#
        expectError(try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: huge), .payloadTooLarge, "payload_too_large")
        expectError(try await stack.callAPI(.PATCH, "/dailyroundup/lists", token: token, body: "{}"), .methodNotAllowed, "method_not_allowed")
        expectError(try await stack.callAPI(.GET, "/dailyroundup/nothing-here", token: token), .notFound, "not_found")
        expectError(try await stack.callAPI(.GET, "/dailyroundup/lists/nope", token: token), .notFound, "not_found")
        expectError(try await stack.callAPI(.GET, "/dailyroundup/changes?limit=abc", token: token), .badRequest, "bad_request", mentioning: "limit")
        expectError(
            try await stack.callAPI(.GET, "/dailyroundup/changes?limit=1000", token: token), .unprocessableEntity, "unprocessable",
            mentioning: "limit")
        expectError(try await stack.callAPI(.POST, "/dailyroundup/changes/abc/ack", token: token), .badRequest, "bad_request")
        expectError(try await stack.callAPI(.POST, "/dailyroundup/changes/999999/ack", token: token), .notFound, "not_found")
        expectError(
            try await stack.callAPI(.POST, "/dailyroundup/changes/ack", token: token, body: #"{"ids":["one"]}"#), .badRequest, "bad_request",
            mentioning: "ids[0]")
        expectError(
            try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: #"{"name":"x","trello_board_id":"B/1","trello_list_id":"L1"}"#),
            .unprocessableEntity, "unprocessable", mentioning: "trello_board_id")

        // Credentials never come back whole, and never reach the log.
        let key = "trello-key-ABCDEF0123456789", trelloToken = "trello-token-ABCDEF0123456789", secret = "trello-secret-ABCDEF0123456789"
        let put = try await stack.callAPI(
            .PUT, "/dailyroundup/account", token: token,
            body: #"{"trello_api_key":"\#(key)","trello_token":"\#(trelloToken)","trello_webhook_secret":"\#(secret)"}"#)
        #expect(put.status == .ok)
        let shown = try await stack.callAPI(.GET, "/dailyroundup/account", token: token)
        for value in [key, trelloToken, secret] {
            #expect(!put.body.contains(value) && !shown.body.contains(value))
            #expect(shown.body.contains(String(value.suffix(4))))
            #expect(!(stack.api?.output.contains(value) ?? true))
        }
        #expect(!(stack.api?.output.contains(token) ?? true))
        #expect(!(stack.api?.output.contains(Self.bootstrap) ?? true))

        // Past the per-account rate, 429 with Retry-After.
        var limited: Stack.Response?
        for _ in 0..<60 {
            let response = try await stack.callAPI(.GET, "/dailyroundup/account", token: token)
            if response.status == .tooManyRequests {
                limited = response
                break
            }
        }
        let response = try #require(limited)
        #expect(response.json["error"]?["code"] == "rate_limited")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func accountCreationIsOffWithoutABootstrapToken(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        try await stack.startAPI(bootstrapToken: nil)
        let response = try await stack.callAPI(.POST, "/dailyroundup/account", token: "anything-at-all-0000")
        #expect(response.status == .forbidden)
        #expect(response.json["error"]?["message"]?.stringValue?.contains("ROUNDUP_BOOTSTRAP_TOKEN") == true)
        #expect(try await stack.callAPI(.GET, "/readyz", token: nil).status == .ok)
        await stack.shutdown()
    }
}

/// docs/openapi.yaml and the router describe the same endpoints.
@Suite struct OpenAPIDocumentTests {
    @Test func documentAndRoutesAreTheSameSet() async throws {
        let text = try String(contentsOf: TestSupport.sourceRoot.appendingPathComponent("docs/openapi.yaml"), encoding: .utf8)
        var documented = Set<String>()
        var inPaths = false
        var currentPath: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("paths:") {
                inPaths = true
                continue
            }
            if inPaths, let first = line.first, first != " ", first != "#" { inPaths = false }
            guard inPaths else { continue }
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                currentPath = String(line.dropFirst(2).dropLast())
            } else if let path = currentPath, line.hasPrefix("    "), !line.hasPrefix("     "), line.hasSuffix(":") {
                let method = line.trimmingCharacters(in: .whitespaces).dropLast().uppercased()
                if ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"].contains(method) { documented.insert("\(method) \(path)") }
            }
        }
        let registered = Set(try await InProcessAPI.run(bootstrapToken: nil) { $0.routeNames })
        #expect(!documented.isEmpty)
        #expect(
            documented == registered,
            "only in the document: \(documented.subtracting(registered)); only in the router: \(registered.subtracting(documented))")
    }
}

/// The field vocabulary is one enum (`SyncField`), its raw values the wire names: the OpenAPI document's `FieldName`
/// (every field the apps see) and `SyncFieldName` (those they write) list exactly its cases and `SyncFields.writable`.
@Suite struct FieldVocabularyTests {
    /// The names of a `enum: [a, b, …]` line of the schema `name`.
    static func documentedEnum(_ name: String) throws -> [String] {
        let text = try String(contentsOf: TestSupport.sourceRoot.appendingPathComponent("docs/openapi.yaml"), encoding: .utf8)
        let lines = text.split(separator: "\n").map(String.init)
        let start = try #require(lines.firstIndex(of: "    \(name):"), "no schema \(name)")
        let line = try #require(lines[start...].prefix(4).first { $0.contains("enum: [") }, "\(name) has no enum")
        let inside = line.drop { $0 != "[" }.dropFirst().prefix { $0 != "]" }
        return inside.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    }

    @Test func theDocumentNamesExactlyTheEnumsFields() throws {
        #expect(try Self.documentedEnum("FieldName") == SyncField.allCases.map(\.rawValue))
        #expect(Set(try Self.documentedEnum("SyncFieldName")) == Set(SyncFields.writable.map(\.rawValue)))
        // Every field but the card's Trello page is written by the apps.
        #expect(Set(SyncField.allCases).subtracting(SyncFields.writable) == [.trelloURL])
        for field in SyncField.allCases {
            #expect(SyncField(rawValue: field.rawValue) == field && "\(field)" == field.rawValue)
        }
    }
}
