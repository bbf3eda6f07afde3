import AsyncHTTPClient
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import RoundupTrello
import Testing

/// A corpus of bad requests against the API's router in this process (`InProcessAPI`): every one gets the exact 4xx
/// its handler gives, with the `{"error": {"code", "message"}}` envelope, none a 5xx; afterwards the API still
/// answers, and no rejected request stored, changed, deleted or queued anything.
@Suite(.serialized) struct APIBadInputTests {
    struct Case {
        var name: String
        var method: HTTPMethod = .POST
        var path: String
        var body: [UInt8]? = nil
        var type: String? = "application/json"
        var auth: Auth = .account
        var headers: [String: String] = [:]
        var expect: HTTPResponseStatus

        enum Auth {
            /// The test account's token.
            case account
            case anonymous
            /// `Authorization: Bearer <token>`.
            case bearer(String)
            /// The whole Authorization header.
            case header(String)
        }
    }

    /// What a rejected request must not change.
    struct Snapshot {
        var lists: [SyncListRecord]
        var changes: [PendingChange]
        var devices: [DeviceRecord]
        var conflicts: [ConflictRecord]
        var duplicates: [DuplicateRecord]
        var account: AccountDetails?
        var accounts: Int
        var jobs: Int
        var jobStream: Int
        var webhookSecrets: Int
    }

    func snapshot(_ api: InProcessAPI, account: String) async throws -> Snapshot {
        let store = api.store
        return Snapshot(
            lists: try await store.syncLists(accountID: account),
            changes: try await store.pendingChanges(accountID: account, afterID: 0, limit: 10_000),
            devices: try await store.devices(accountID: account),
            conflicts: try await store.conflicts(accountID: account),
            duplicates: try await store.duplicates(accountID: account),
            account: try await store.accountDetails(id: account),
            accounts: try await store.allAccounts().count,
            jobs: try await store.jobs(limit: 10_000, id: nil).count,
            jobStream: try await jobStreamLength(api),
            webhookSecrets: try await api.redis.send("HLEN", RedisArgument(api.keys.webhookSecrets)).int ?? -1)
    }

    func jobStreamLength(_ api: InProcessAPI) async throws -> Int {
        try await api.redis.send("XLEN", RedisArgument(api.keys.jobStream)).int ?? -1
    }

    /// Sends a case as it is: raw body bytes, its content type (or none), its Authorization.
    private func send(_ api: InProcessAPI, _ c: Case, token: String) async throws -> (status: HTTPResponseStatus, contentType: String?, body: String)
    {
        var headers = HTTPFields()
        switch c.auth {
        case .account: headers[.authorization] = "Bearer \(token)"
        case .anonymous: break
        case .bearer(let value): headers[.authorization] = "Bearer \(value)"
        case .header(let value): headers[.authorization] = value
        }
        if c.body != nil, let type = c.type { headers[.contentType] = type }
        for (name, value) in c.headers {
            headers.append(HTTPField(name: try #require(HTTPField.Name(name)), value: value))
        }
        let response = try await api.send(c.method, c.path, headers: headers, body: c.body)
        return (response.status, response.contentType, response.body)
    }

    @Test(arguments: StoreBackend.available) func corpus(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: APITests.bootstrap) { api in try await self.corpus(api) }
    }

    func corpus(_ api: InProcessAPI) async throws {
        let created = try await api.call(.POST, "/dailyroundup/account", token: APITests.bootstrap)
        #expect(created.status == .created, "\(created.body)")
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)

        // Something to lose: two lists, a pending change (card C1 on the first list) and a device, straight in the store.
        let store = api.store
        let list = try await store.createSyncList(accountID: account, name: "Errands", trelloBoardID: "B1", trelloListID: "L1")
        let otherList = try await store.createSyncList(accountID: account, name: "Garden", trelloBoardID: "B1", trelloListID: "L2")
        _ = try await store.apply([
            CardObservation(
                accountID: account, syncListID: list.id, cardID: "C1", actionID: "A1", actionDate: Date(),
                kind: .fields(["title": "Stamps"], full: true))
        ])
        _ = try await store.upsertDevice(
            accountID: account, deviceID: "phone-1", apnsToken: String(repeating: "ab", count: 32), platform: .ios, environment: .sandbox)
        let before = try await snapshot(api, account: account)
        #expect(before.lists.count == 2 && before.changes.count == 1 && before.devices.count == 1)

        func raw(_ text: String) -> [UInt8] { Array(text.utf8) }
        func json(_ value: JSONValue) -> [UInt8] { Array(value.canonicalJSON.utf8) }

        // A valid sync change (checked at the end), and variations of it with one fault each.
        func change(_ set: [String: JSONValue] = [:], without: Set<String> = []) -> JSONValue {
            var object: [String: JSONValue] = [
                "op": "create", "sync_list_id": .string(list.id), "reminder_id": "R-1", "fields": .object(["title": "Stamps"]),
                "modified_at": "2026-11-23T09:00:00Z",
            ]
            for (key, value) in set { object[key] = value }
            for key in without { object.removeValue(forKey: key) }
            return .object(object)
        }
        func fields(_ fields: [String: JSONValue]) -> JSONValue { change(["fields": .object(fields)]) }
        func sync(_ changes: [JSONValue], device: JSONValue = "iphone-1") -> [UInt8] {
            json(.object(["device_id": device, "changes": .array(changes)]))
        }
        func syncRaw(_ changesJSON: String) -> [UInt8] { raw(#"{"device_id":"iphone-1","changes":"# + changesJSON + "}") }
        let apns = String(repeating: "0f", count: 32)
        func device(_ set: [String: JSONValue] = [:], without: Set<String> = []) -> [UInt8] {
            var object: [String: JSONValue] = ["device_id": "mac-1", "apns_token": .string(apns), "platform": "macos", "environment": "production"]
            for (key, value) in set { object[key] = value }
            for key in without { object.removeValue(forKey: key) }
            return json(.object(object))
        }
        func pairing(_ set: [String: JSONValue] = [:], without: Set<String> = []) -> [UInt8] {
            var object: [String: JSONValue] = ["name": "Groceries", "trello_board_id": "B9", "trello_list_id": "L9"]
            for (key, value) in set { object[key] = value }
            for key in without { object.removeValue(forKey: key) }
            return json(.object(object))
        }

        let over = [UInt8](repeating: UInt8(ascii: "x"), count: (1 << 20) + 64)  // the API's limit is 1 MiB (APIRequestContext)
        let deepArrays = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)  // the parser stops at depth 256
        let deepObjects = String(repeating: #"{"a":"#, count: 10_000) + "1" + String(repeating: "}", count: 10_000)
        let invalidUTF8: [UInt8] = [0xC3, 0x28, 0xFF, 0xFE]
        let hundredKB = String(repeating: "n", count: 100_000)
        let accountPath = "/dailyroundup/account", lists = "/dailyroundup/lists", devices = "/dailyroundup/devices"
        let changes = "/dailyroundup/changes", ack = "/dailyroundup/changes/ack", syncPath = "/dailyroundup/sync"

        // Authentication and the bootstrap token.
        let authCases: [Case] = [
            Case(name: "bootstrap: wrong token", path: accountPath, auth: .bearer("wrong-bootstrap-token-000"), expect: .unauthorized),
            Case(name: "bootstrap: no Authorization", path: accountPath, auth: .anonymous, expect: .unauthorized),
            Case(name: "bootstrap: token plus a character", path: accountPath, auth: .bearer(APITests.bootstrap + "0"), expect: .unauthorized),
            Case(name: "bootstrap: token upper-cased", path: accountPath, auth: .bearer(APITests.bootstrap.uppercased()), expect: .unauthorized),
            Case(name: "bootstrap: Basic scheme", path: accountPath, auth: .header("Basic Ym9vdHN0cmFwOng="), expect: .unauthorized),
            Case(name: "bootstrap: Bearer without a token", path: accountPath, auth: .header("Bearer"), expect: .unauthorized),
            Case(name: "bootstrap: an account token", path: accountPath, auth: .account, expect: .unauthorized),
            Case(
                name: "bootstrap token on an account route", method: .GET, path: accountPath, auth: .bearer(APITests.bootstrap), expect: .unauthorized
            ),
            Case(name: "delete account, wrong token", method: .DELETE, path: accountPath, auth: .bearer("rt_not-a-token"), expect: .unauthorized),
            Case(name: "rotate token, no Authorization", path: "/dailyroundup/account/token", auth: .anonymous, expect: .unauthorized),
            Case(name: "sync, no Authorization", path: syncPath, body: sync([change()]), auth: .anonymous, expect: .unauthorized),
        ]
        // PUT /dailyroundup/account: body shape, content type, fields.
        let accountCases: [Case] = [
            Case(name: "account: malformed JSON", method: .PUT, path: accountPath, body: raw("{not json"), expect: .badRequest),
            Case(name: "account: truncated JSON", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"arch"#), expect: .badRequest),
            Case(name: "account: empty body", method: .PUT, path: accountPath, body: [], expect: .badRequest),
            Case(name: "account: white space only", method: .PUT, path: accountPath, body: raw("  \n "), expect: .badRequest),
            Case(name: "account: JSON array", method: .PUT, path: accountPath, body: raw(#"[{"delete_mode":"archive"}]"#), expect: .badRequest),
            Case(name: "account: JSON string", method: .PUT, path: accountPath, body: raw(#""lww""#), expect: .badRequest),
            Case(name: "account: JSON null", method: .PUT, path: accountPath, body: raw("null"), expect: .badRequest),
            Case(name: "account: JSON number", method: .PUT, path: accountPath, body: raw("42"), expect: .badRequest),
            Case(name: "account: trailing garbage", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"archive"} x"#), expect: .badRequest),
            Case(
                name: "account: UTF-8 BOM", method: .PUT, path: accountPath, body: [0xEF, 0xBB, 0xBF] + raw(#"{"delete_mode":"archive"}"#),
                expect: .badRequest),
            Case(
                name: "account: NUL byte in a string", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"arch"#) + [0] + raw(#"ive"}"#),
                expect: .badRequest),
            Case(
                name: "account: invalid UTF-8 outside strings", method: .PUT, path: accountPath, body: raw("{") + invalidUTF8 + raw("}"),
                expect: .badRequest),
            Case(name: "account: invalid UTF-8 bytes only", method: .PUT, path: accountPath, body: invalidUTF8, expect: .badRequest),
            // Found by schemathesis: a key with control characters was stored, then broke the Trello request's header.
            Case(
                name: "account: trello_token with a control character", method: .PUT, path: accountPath,
                body: raw(#"{"trello_token":"abc\u001bdef"}"#), expect: .unprocessableEntity),
            Case(
                name: "account: trello_api_key not ASCII", method: .PUT, path: accountPath, body: raw(#"{"trello_api_key":"clé-0123456789"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: trello_webhook_secret with a space", method: .PUT, path: accountPath,
                body: raw(#"{"trello_webhook_secret":"two words"}"#), expect: .unprocessableEntity),
            Case(
                name: "account: NUL in a string", method: .PUT, path: accountPath, body: raw(#"{"trello_token":"abc\u0000def"}"#), expect: .badRequest
            ),
            Case(name: "account: NUL in a key", method: .PUT, path: accountPath, body: raw(#"{"conflict\u0000policy":"lww"}"#), expect: .badRequest),
            Case(
                name: "account: content type application/jsonp", method: .PUT, path: accountPath, body: raw(#"{"conflict_policy":"lww"}"#),
                type: "application/jsonp", expect: .unsupportedMediaType),
            // Not rejected by the parser (decoded with U+FFFD): rejected as a value that is not one of the choices.
            Case(
                name: "account: invalid UTF-8 in conflict_policy", method: .PUT, path: accountPath,
                body: raw(#"{"conflict_policy":""#) + invalidUTF8 + raw(#""}"#), expect: .badRequest),
            Case(
                name: "account: invalid UTF-8 in a key", method: .PUT, path: accountPath, body: raw(#"{""#) + invalidUTF8 + raw(#"":"lww"}"#),
                expect: .badRequest),
            Case(
                name: "account: 10,000 nested arrays", method: .PUT, path: accountPath, body: raw(#"{"conflict_policy":"# + deepArrays + "}"),
                expect: .badRequest),
            Case(name: "account: 10,000 nested objects", method: .PUT, path: accountPath, body: raw(deepObjects), expect: .badRequest),
            Case(
                name: "account: 10,000 unclosed arrays", method: .PUT, path: accountPath, body: raw(String(repeating: "[", count: 10_000)),
                expect: .badRequest),
            Case(
                name: "account: over 1 MiB", method: .PUT, path: accountPath, body: raw(#"{"trello_token":""#) + over + raw(#""}"#),
                expect: .payloadTooLarge),
            Case(
                name: "account: text/plain", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"archive"}"#), type: "text/plain",
                expect: .unsupportedMediaType),
            Case(
                name: "account: form-encoded", method: .PUT, path: accountPath, body: raw("delete_mode=archive"),
                type: "application/x-www-form-urlencoded", expect: .unsupportedMediaType),
            Case(
                name: "account: no content type", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"archive"}"#), type: nil,
                expect: .unsupportedMediaType),
            Case(
                name: "account: application/xml", method: .PUT, path: accountPath, body: raw("<delete_mode>archive</delete_mode>"),
                type: "application/xml", expect: .unsupportedMediaType),
            Case(
                name: "account: multipart", method: .PUT, path: accountPath, body: raw("--x\r\n\r\narchive\r\n--x--"),
                type: "multipart/form-data; boundary=x", expect: .unsupportedMediaType),
            Case(
                name: "account: unknown field", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"archive","is_admin":true}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: id is not writable", method: .PUT, path: accountPath, body: raw(#"{"account_id":"someone-else"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: bad conflict_policy", method: .PUT, path: accountPath, body: raw(#"{"conflict_policy":"coin_flip"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: conflict_policy upper case", method: .PUT, path: accountPath, body: raw(#"{"conflict_policy":"LWW"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: bad delete_mode", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":"shred"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "account: good key, bad delete_mode", method: .PUT, path: accountPath,
                body: raw(#"{"trello_api_key":"k-123","delete_mode":"shred"}"#), expect: .unprocessableEntity),
            Case(
                name: "account: last duplicate key is bad", method: .PUT, path: accountPath,
                body: raw(#"{"delete_mode":"archive","delete_mode":"shred"}"#), expect: .unprocessableEntity),
            Case(
                name: "account: conflict_policy a number", method: .PUT, path: accountPath, body: raw(#"{"conflict_policy":1}"#), expect: .badRequest),
            Case(name: "account: delete_mode a bool", method: .PUT, path: accountPath, body: raw(#"{"delete_mode":true}"#), expect: .badRequest),
            Case(
                name: "account: webhook secret an object", method: .PUT, path: accountPath, body: raw(#"{"trello_webhook_secret":{}}"#),
                expect: .badRequest),
            Case(name: "account: api key an array", method: .PUT, path: accountPath, body: raw(#"{"trello_api_key":["k"]}"#), expect: .badRequest),
            Case(name: "account: empty api key", method: .PUT, path: accountPath, body: raw(#"{"trello_api_key":""}"#), expect: .unprocessableEntity),
            Case(name: "account: blank token", method: .PUT, path: accountPath, body: raw(#"{"trello_token":"   "}"#), expect: .unprocessableEntity),
            Case(
                name: "account: 100 KB api key", method: .PUT, path: accountPath, body: json(.object(["trello_api_key": .string(hundredKB)])),
                expect: .unprocessableEntity),
            Case(
                name: "account: 501-character token", method: .PUT, path: accountPath,
                body: json(.object(["trello_token": .string(String(repeating: "t", count: 501))])), expect: .unprocessableEntity),
            Case(name: "account: empty object", method: .PUT, path: accountPath, body: raw("{}"), expect: .unprocessableEntity),
            Case(
                name: "account: only nulls", method: .PUT, path: accountPath, body: raw(#"{"trello_token":null,"delete_mode":null}"#),
                expect: .unprocessableEntity),
            Case(name: "account: PATCH", method: .PATCH, path: accountPath, body: raw(#"{"delete_mode":"archive"}"#), expect: .methodNotAllowed),
        ]
        // POST /dailyroundup/lists (the account has no Trello credentials: a valid pairing is a 409).
        let listCases: [Case] = [
            Case(name: "lists: malformed JSON", path: lists, body: raw(#"{"name":"x",}"#), expect: .badRequest),
            Case(name: "lists: JSON array", path: lists, body: raw("[]"), expect: .badRequest),
            Case(name: "lists: text/plain", path: lists, body: pairing(), type: "text/plain", expect: .unsupportedMediaType),
            Case(
                name: "lists: form-encoded", path: lists, body: raw("name=x&trello_board_id=B9&trello_list_id=L9"),
                type: "application/x-www-form-urlencoded", expect: .unsupportedMediaType),
            Case(name: "lists: unknown field", path: lists, body: pairing(["webhook_url": "http://evil.example"]), expect: .unprocessableEntity),
            Case(name: "lists: name missing", path: lists, body: pairing(without: ["name"]), expect: .unprocessableEntity),
            Case(name: "lists: name a number", path: lists, body: pairing(["name": .number(42)]), expect: .badRequest),
            Case(name: "lists: empty name", path: lists, body: pairing(["name": ""]), expect: .unprocessableEntity),
            Case(name: "lists: 100 KB name", path: lists, body: pairing(["name": .string(hundredKB)]), expect: .unprocessableEntity),
            Case(name: "lists: board id with a slash", path: lists, body: pairing(["trello_board_id": "B/1"]), expect: .unprocessableEntity),
            Case(name: "lists: board id path traversal", path: lists, body: pairing(["trello_board_id": "../../etc"]), expect: .unprocessableEntity),
            Case(name: "lists: list id not ASCII", path: lists, body: pairing(["trello_list_id": "Lé9"]), expect: .unprocessableEntity),
            Case(
                name: "lists: list id 65 characters", path: lists, body: pairing(["trello_list_id": .string(String(repeating: "a", count: 65))]),
                expect: .unprocessableEntity),
            Case(name: "lists: list id a bool", path: lists, body: pairing(["trello_list_id": false]), expect: .badRequest),
            Case(name: "lists: valid, but no Trello credentials", path: lists, body: pairing(), expect: .conflict),
            Case(name: "lists: get unknown", method: .GET, path: lists + "/nope", expect: .notFound),
            Case(name: "lists: get percent-encoded traversal", method: .GET, path: lists + "/..%2F..%2Faccount", expect: .notFound),
            // 404 whether or not the client folds the dots
            Case(name: "lists: dot segments", method: .GET, path: lists + "/../lists/nope", expect: .notFound),
            Case(name: "lists: delete unknown", method: .DELETE, path: lists + "/%2e%2e", expect: .notFound),
            Case(name: "lists: import unknown", path: lists + "/nope/import", expect: .notFound),
            Case(name: "lists: reconcile traversal", path: lists + "/..%2F" + otherList.id + "/reconcile", expect: .notFound),
        ]
        // Devices.
        let deviceCases: [Case] = [
            Case(name: "devices: truncated JSON", path: devices, body: Array(device().dropLast(5)), expect: .badRequest),
            Case(name: "devices: JSON string", path: devices, body: raw(#""mac-1""#), expect: .badRequest),
            Case(name: "devices: empty body", path: devices, body: [], expect: .badRequest),
            Case(name: "devices: over 1 MiB", path: devices, body: raw(#"{"device_id":""#) + over + raw(#""}"#), expect: .payloadTooLarge),
            Case(name: "devices: text/plain", path: devices, body: device(), type: "text/plain", expect: .unsupportedMediaType),
            Case(
                name: "devices: form-encoded", path: devices, body: raw("device_id=mac-1&platform=macos"), type: "application/x-www-form-urlencoded",
                expect: .unsupportedMediaType),
            Case(name: "devices: unknown field", path: devices, body: device(["push_topic": "x"]), expect: .unprocessableEntity),
            Case(
                name: "devices: apns_token not hex", path: devices, body: device(["apns_token": .string(String(repeating: "zz", count: 32))]),
                expect: .unprocessableEntity),
            Case(
                name: "devices: apns_token odd length", path: devices, body: device(["apns_token": .string(apns + "a")]), expect: .unprocessableEntity
            ),
            Case(
                name: "devices: apns_token too short", path: devices, body: device(["apns_token": .string(String(repeating: "0f", count: 15))]),
                expect: .unprocessableEntity),
            Case(
                name: "devices: apns_token over 400", path: devices, body: device(["apns_token": .string(String(repeating: "0f", count: 201))]),
                expect: .unprocessableEntity),
            Case(
                name: "devices: apns_token with a space inside", path: devices,
                body: device(["apns_token": .string(String(repeating: "0f", count: 16) + " " + String(repeating: "0f", count: 16))]),
                expect: .unprocessableEntity),
            Case(
                name: "devices: apns_token with invalid UTF-8", path: devices,
                body: raw(#"{"device_id":"mac-1","platform":"macos","environment":"production","apns_token":""#)
                    + raw(String(repeating: "0f", count: 31)) + invalidUTF8 + raw(#""}"#), expect: .badRequest),
            Case(name: "devices: apns_token a number", path: devices, body: device(["apns_token": .number(1234)]), expect: .badRequest),
            Case(name: "devices: android", path: devices, body: device(["platform": "android"]), expect: .unprocessableEntity),
            Case(name: "devices: platform iOS", path: devices, body: device(["platform": "iOS"]), expect: .unprocessableEntity),
            Case(name: "devices: environment staging", path: devices, body: device(["environment": "staging"]), expect: .unprocessableEntity),
            Case(name: "devices: environment a bool", path: devices, body: device(["environment": true]), expect: .badRequest),
            Case(name: "devices: platform missing", path: devices, body: device(without: ["platform"]), expect: .unprocessableEntity),
            Case(name: "devices: empty device_id", path: devices, body: device(["device_id": ""]), expect: .unprocessableEntity),
            Case(
                name: "devices: 201-character device_id", path: devices, body: device(["device_id": .string(String(repeating: "d", count: 201))]),
                expect: .unprocessableEntity),
            Case(name: "devices: device_id a number", path: devices, body: device(["device_id": .number(7)]), expect: .badRequest),
            Case(name: "devices: delete unknown", method: .DELETE, path: devices + "/no-such-device", expect: .notFound),
            Case(name: "devices: delete traversal", method: .DELETE, path: devices + "/..%2F..%2Faccount", expect: .notFound),
            Case(name: "devices: delete %00", method: .DELETE, path: devices + "/%00", expect: .notFound),
            Case(name: "devices: delete with no id", method: .DELETE, path: devices + "/", expect: .methodNotAllowed),
        ]
        // GET /dailyroundup/changes query values.
        let queryCases: [Case] = [
            Case(name: "changes: limit abc", method: .GET, path: changes + "?limit=abc", expect: .badRequest),
            Case(name: "changes: limit empty", method: .GET, path: changes + "?limit=", expect: .badRequest),
            Case(name: "changes: limit 1.5", method: .GET, path: changes + "?limit=1.5", expect: .badRequest),
            Case(name: "changes: limit 0", method: .GET, path: changes + "?limit=0", expect: .unprocessableEntity),
            Case(name: "changes: limit -1", method: .GET, path: changes + "?limit=-1", expect: .unprocessableEntity),
            Case(name: "changes: limit %2D5", method: .GET, path: changes + "?limit=%2D5", expect: .unprocessableEntity),
            Case(name: "changes: limit 501", method: .GET, path: changes + "?limit=501", expect: .unprocessableEntity),
            Case(name: "changes: limit past Int", method: .GET, path: changes + "?limit=99999999999999999999", expect: .badRequest),
            Case(name: "changes: after_id -1", method: .GET, path: changes + "?after_id=-1", expect: .unprocessableEntity),
            Case(name: "changes: after_id abc", method: .GET, path: changes + "?after_id=abc", expect: .badRequest),
            Case(name: "changes: after_id 1e3", method: .GET, path: changes + "?after_id=1e3", expect: .badRequest),
            Case(name: "changes: after_id %00", method: .GET, path: changes + "?after_id=%00", expect: .badRequest),
            Case(name: "changes: after_id Int64.max + 1", method: .GET, path: changes + "?after_id=9223372036854775808", expect: .badRequest),
            Case(name: "changes: after_id huge", method: .GET, path: changes + "?after_id=99999999999999999999999", expect: .badRequest),
        ]
        // POST /dailyroundup/changes/{id}/ack.
        let ackOneCases: [Case] = [
            Case(name: "ack: id abc", path: changes + "/abc/ack", expect: .badRequest),
            Case(name: "ack: id -1", path: changes + "/-1/ack", expect: .notFound),
            Case(name: "ack: id 0", path: changes + "/0/ack", expect: .notFound),
            Case(name: "ack: id never issued", path: changes + "/99999999999/ack", expect: .notFound),
            Case(name: "ack: id past Int64", path: changes + "/99999999999999999999999/ack", expect: .badRequest),
            Case(name: "ack: id 1.0", path: changes + "/1.0/ack", expect: .badRequest),
            Case(name: "ack: id 0x1", path: changes + "/0x1/ack", expect: .badRequest),
            Case(name: "ack: id percent-encoded", path: changes + "/%2D1/ack", expect: .badRequest),
            Case(name: "ack: id traversal", path: changes + "/..%2F..%2Faccount/ack", expect: .badRequest),
            Case(name: "ack: malformed body", path: changes + "/99999999999/ack", body: raw("{reminder_id: R1}"), expect: .badRequest),
            Case(
                name: "ack: text/plain body", path: changes + "/99999999999/ack", body: raw(#"{"reminder_id":"R1"}"#), type: "text/plain",
                expect: .unsupportedMediaType),
            Case(name: "ack: reminder_id a number", path: changes + "/99999999999/ack", body: raw(#"{"reminder_id":5}"#), expect: .badRequest),
            Case(name: "ack: empty reminder_id", path: changes + "/99999999999/ack", body: raw(#"{"reminder_id":""}"#), expect: .unprocessableEntity),
            Case(
                name: "ack: unknown field", path: changes + "/99999999999/ack", body: raw(#"{"reminder_id":"R1","all":true}"#),
                expect: .unprocessableEntity),
            Case(name: "ack: GET", method: .GET, path: changes + "/1/ack", expect: .methodNotAllowed),
        ]
        // POST /dailyroundup/changes/ack.
        let ackManyCases: [Case] = [
            Case(name: "ack many: JSON array", path: ack, body: raw("[1,2]"), expect: .badRequest),
            Case(
                name: "ack many: form-encoded", path: ack, body: raw("ids=1&ids=2"), type: "application/x-www-form-urlencoded",
                expect: .unsupportedMediaType),
            Case(name: "ack many: neither acks nor ids", path: ack, body: raw("{}"), expect: .unprocessableEntity),
            Case(name: "ack many: unknown field", path: ack, body: raw(#"{"ids":[1],"everything":true}"#), expect: .unprocessableEntity),
            Case(name: "ack many: ids a string", path: ack, body: raw(#"{"ids":"1"}"#), expect: .badRequest),
            Case(name: "ack many: id a string", path: ack, body: raw(#"{"ids":["one"]}"#), expect: .badRequest),
            Case(name: "ack many: id 2.5", path: ack, body: raw(#"{"ids":[2.5]}"#), expect: .badRequest),
            // No double holds it: refused where the body is read, naming its path (NothingDroppedTests).
            Case(name: "ack many: id 1e400", path: ack, body: raw(#"{"ids":[1e400]}"#), expect: .unprocessableEntity),
            Case(name: "ack many: id with a leading zero", path: ack, body: raw(#"{"ids":[01]}"#), expect: .badRequest),
            Case(name: "ack many: id -5", path: ack, body: raw(#"{"ids":[-5]}"#), expect: .notFound),
            Case(name: "ack many: id -0", path: ack, body: raw(#"{"ids":[-0]}"#), expect: .notFound),
            Case(name: "ack many: no ids", path: ack, body: raw(#"{"ids":[]}"#), expect: .unprocessableEntity),
            Case(name: "ack many: empty acks wins over ids", path: ack, body: raw(#"{"acks":[],"ids":[1]}"#), expect: .unprocessableEntity),
            Case(name: "ack many: acks an object", path: ack, body: raw(#"{"acks":{"id":1}}"#), expect: .badRequest),
            Case(name: "ack many: ack a number", path: ack, body: raw(#"{"acks":[5]}"#), expect: .badRequest),
            Case(name: "ack many: ack without id", path: ack, body: raw(#"{"acks":[{"reminder_id":"R1"}]}"#), expect: .badRequest),
            Case(name: "ack many: ack id a string", path: ack, body: raw(#"{"acks":[{"id":"1"}]}"#), expect: .badRequest),
            Case(name: "ack many: ack empty reminder_id", path: ack, body: raw(#"{"acks":[{"id":1,"reminder_id":""}]}"#), expect: .badRequest),
            Case(
                name: "ack many: 501 ids", path: ack, body: raw(#"{"ids":["# + Array(repeating: "-1", count: 501).joined(separator: ",") + "]}"),
                expect: .unprocessableEntity),
            Case(
                name: "ack many: 100,000 ids", path: ack,
                body: raw(#"{"ids":["# + Array(repeating: "-1", count: 100_000).joined(separator: ",") + "]}"), expect: .unprocessableEntity),
        ]
        // POST /dailyroundup/sync: the envelope.
        let syncCases: [Case] = [
            Case(name: "sync: malformed JSON", path: syncPath, body: raw(#"{"device_id":"iphone-1","changes":[{]}"#), expect: .badRequest),
            Case(name: "sync: truncated JSON", path: syncPath, body: Array(sync([change()]).dropLast(3)), expect: .badRequest),
            Case(name: "sync: JSON array", path: syncPath, body: json(.array([change()])), expect: .badRequest),
            Case(name: "sync: over 1 MiB", path: syncPath, body: raw(#"{"device_id":""#) + over + raw(#""}"#), expect: .payloadTooLarge),
            Case(name: "sync: text/plain", path: syncPath, body: sync([change()]), type: "text/plain", expect: .unsupportedMediaType),
            Case(
                name: "sync: form-encoded", path: syncPath, body: raw("device_id=iphone-1&changes=x"), type: "application/x-www-form-urlencoded",
                expect: .unsupportedMediaType),
            Case(name: "sync: 10,000 nested arrays", path: syncPath, body: syncRaw(deepArrays), expect: .badRequest),
            Case(
                name: "sync: unknown field", path: syncPath,
                body: json(.object(["device_id": "iphone-1", "changes": .array([change()]), "force": true])), expect: .unprocessableEntity),
            Case(name: "sync: device_id missing", path: syncPath, body: json(.object(["changes": .array([change()])])), expect: .unprocessableEntity),
            Case(name: "sync: device_id a number", path: syncPath, body: sync([change()], device: .number(42)), expect: .badRequest),
            Case(name: "sync: empty device_id", path: syncPath, body: sync([change()], device: ""), expect: .unprocessableEntity),
            Case(name: "sync: changes missing", path: syncPath, body: raw(#"{"device_id":"iphone-1"}"#), expect: .unprocessableEntity),
            Case(name: "sync: changes an object", path: syncPath, body: syncRaw("{}"), expect: .badRequest),
            Case(name: "sync: changes a string", path: syncPath, body: syncRaw(#""all""#), expect: .badRequest),
            Case(name: "sync: no changes", path: syncPath, body: syncRaw("[]"), expect: .unprocessableEntity),
            // at most 500
            Case(name: "sync: 600 changes", path: syncPath, body: sync(Array(repeating: change(), count: 600)), expect: .unprocessableEntity),
            Case(
                name: "sync: 100,000 changes", path: syncPath,
                body: syncRaw("[" + Array(repeating: "{}", count: 100_000).joined(separator: ",") + "]"), expect: .unprocessableEntity),
            Case(
                name: "sync: Idempotency-Key over 200", path: syncPath, body: sync([change()]),
                headers: ["Idempotency-Key": String(repeating: "k", count: 201)], expect: .unprocessableEntity),
            Case(name: "sync: PUT", method: .PUT, path: syncPath, body: sync([change()]), expect: .methodNotAllowed),
        ]
        // POST /dailyroundup/sync: one bad change.
        let changeCases: [Case] = [
            Case(name: "sync: change a string", path: syncPath, body: sync(["create"]), expect: .badRequest),
            Case(name: "sync: change null", path: syncPath, body: sync([.null]), expect: .badRequest),
            Case(name: "sync: change an array", path: syncPath, body: sync([.array([change()])]), expect: .badRequest),
            Case(name: "sync: unknown change field", path: syncPath, body: sync([change(["priority": "high"])]), expect: .unprocessableEntity),
            Case(name: "sync: op erase", path: syncPath, body: sync([change(["op": "erase"])]), expect: .unprocessableEntity),
            Case(name: "sync: op a number", path: syncPath, body: sync([change(["op": .number(1)])]), expect: .badRequest),
            Case(name: "sync: op missing", path: syncPath, body: sync([change(without: ["op"])]), expect: .unprocessableEntity),
            Case(name: "sync: unknown list", path: syncPath, body: sync([change(["sync_list_id": "no-such-list"])]), expect: .unprocessableEntity),
            Case(
                name: "sync: list id traversal", path: syncPath, body: sync([change(["sync_list_id": .string("../" + list.id)])]),
                expect: .unprocessableEntity),
            Case(name: "sync: empty reminder_id", path: syncPath, body: sync([change(["reminder_id": ""])]), expect: .unprocessableEntity),
            Case(
                name: "sync: 201-character reminder_id", path: syncPath,
                body: sync([change(["reminder_id": .string(String(repeating: "r", count: 201))])]), expect: .unprocessableEntity),
            Case(name: "sync: modified_at missing", path: syncPath, body: sync([change(without: ["modified_at"])]), expect: .unprocessableEntity),
            Case(name: "sync: modified_at tomorrow", path: syncPath, body: sync([change(["modified_at": "tomorrow"])]), expect: .unprocessableEntity),
            Case(
                name: "sync: modified_at European", path: syncPath, body: sync([change(["modified_at": "23/11/2026 09:00"])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: modified_at a number", path: syncPath, body: sync([change(["modified_at": .number(1_795_000_000)])]), expect: .badRequest
            ),
            Case(
                name: "sync: modified_at invalid UTF-8", path: syncPath,
                body: raw(#"{"device_id":"iphone-1","changes":[{"op":"delete","sync_list_id":"\#(list.id)","reminder_id":"R-1","modified_at":""#)
                    + invalidUTF8 + raw(#""}]}"#),
                expect: .badRequest),
            Case(name: "sync: fields a string", path: syncPath, body: sync([change(["fields": "title"])]), expect: .badRequest),
            Case(name: "sync: fields an array", path: syncPath, body: sync([change(["fields": .array(["title"])])]), expect: .badRequest),
            // Values of the right type that cannot be written (an empty title, a date that is no date, an option the board
            // lacks, a malformed URL) fail only their item, in the job: SyncJobTests.aValueTheServerCannotWriteFailsOnlyItsItem.
            Case(name: "sync: create without title", path: syncPath, body: sync([fields(["notes": "no title"])]), expect: .unprocessableEntity),
            Case(name: "sync: title a number", path: syncPath, body: sync([fields(["title": .number(3)])]), expect: .unprocessableEntity),
            Case(
                name: "sync: title over 16 KB", path: syncPath, body: sync([fields(["title": .string(String(repeating: "t", count: 16_385))])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: start_date a number", path: syncPath, body: sync([fields(["title": "x", "start_date": .number(20261123)])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: priority a number", path: syncPath, body: sync([fields(["title": "x", "priority": .number(3)])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: completed yes", path: syncPath, body: sync([fields(["title": "x", "completed": "yes"])]), expect: .unprocessableEntity),
            Case(
                name: "sync: url over 2048 bytes", path: syncPath,
                body: sync([fields(["title": "x", "url": .string("https://example.com/" + String(repeating: "a", count: 2_100))])]),
                expect: .unprocessableEntity),
            Case(name: "sync: url a bool", path: syncPath, body: sync([fields(["title": "x", "url": true])]), expect: .unprocessableEntity),
            Case(name: "sync: changed_fields a string", path: syncPath, body: sync([change(["changed_fields": "title"])]), expect: .badRequest),
            Case(
                name: "sync: changed_fields a number inside", path: syncPath, body: sync([change(["changed_fields": .array([.number(1)])])]),
                expect: .badRequest),
            Case(
                name: "sync: changed_fields not writable", path: syncPath,
                body: sync([change(["changed_fields": .array(["trello_url"]), "fields": .object(["trello_url": "https://trello.com/c/x"])])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: labels a string", path: syncPath, body: sync([fields(["title": "x", "labels": "Home"])]), expect: .unprocessableEntity),
            Case(
                name: "sync: a label a number", path: syncPath, body: sync([fields(["title": "x", "labels": .array([.number(3)])])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: 51 labels", path: syncPath, body: sync([fields(["title": "x", "labels": .array(Array(repeating: "a", count: 51))])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: checklists an object", path: syncPath, body: sync([fields(["title": "x", "checklists": .object([:])])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: a check item's completed a string", path: syncPath,
                body: sync([
                    fields(["title": "x", "checklists": .array([.object(["name": "a", "items": .array([.object(["completed": "yes"])])])])])
                ]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: location a string", path: syncPath, body: sync([fields(["title": "x", "location": "Paris"])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: priority_level a string", path: syncPath, body: sync([fields(["title": "x", "priority_level": "high"])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: due_reminder_minutes a bool", path: syncPath, body: sync([fields(["title": "x", "due_reminder_minutes": true])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: attachments a string", path: syncPath, body: sync([fields(["title": "x", "attachments": "https://example.com"])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: changed_fields not in fields", path: syncPath, body: sync([change(["changed_fields": .array(["notes"])])]),
                expect: .unprocessableEntity),
            Case(name: "sync: update without changed_fields", path: syncPath, body: sync([change(["op": "update"])]), expect: .unprocessableEntity),
            Case(
                name: "sync: unknown card", path: syncPath, body: sync([change(["op": "complete", "trello_card_id": "no-such-card"])]),
                expect: .unprocessableEntity),
            Case(
                name: "sync: good change then a bad one", path: syncPath, body: sync([change(), change(["op": "erase", "reminder_id": "R-2"])]),
                expect: .unprocessableEntity),
        ]
        // Jobs, conflicts, duplicates.
        let reviewCases: [Case] = [
            Case(name: "jobs: unknown", method: .GET, path: "/dailyroundup/sync/jobs/no-such-job", expect: .notFound),
            Case(name: "jobs: traversal", method: .GET, path: "/dailyroundup/sync/jobs/..%2F..%2Faccount", expect: .notFound),
            Case(name: "conflict: id abc", path: "/dailyroundup/conflicts/abc/resolve", body: raw(#"{"choice":"trello"}"#), expect: .notFound),
            Case(name: "conflict: id 0", path: "/dailyroundup/conflicts/0/resolve", body: raw(#"{"choice":"trello"}"#), expect: .notFound),
            Case(name: "conflict: id -3", path: "/dailyroundup/conflicts/-3/resolve", body: raw(#"{"choice":"trello"}"#), expect: .notFound),
            Case(
                name: "conflict: id past Int64", path: "/dailyroundup/conflicts/99999999999999999999/resolve", body: raw(#"{"choice":"trello"}"#),
                expect: .notFound),
            Case(name: "conflict: unknown id", path: "/dailyroundup/conflicts/999999/resolve", body: raw(#"{"choice":"trello"}"#), expect: .notFound),
            Case(
                name: "conflict: choice coin", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"choice":"coin"}"#),
                expect: .unprocessableEntity),
            Case(name: "conflict: choice a number", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"choice":1}"#), expect: .badRequest),
            Case(
                name: "conflict: choice missing", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"value":"x"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "conflict: value without value", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"choice":"value"}"#),
                expect: .unprocessableEntity),
            Case(
                name: "conflict: unknown field", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"choice":"trello","why":"x"}"#),
                expect: .unprocessableEntity),
            Case(name: "conflict: JSON array", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"["trello"]"#), expect: .badRequest),
            Case(name: "conflict: empty body", path: "/dailyroundup/conflicts/1/resolve", body: [], expect: .badRequest),
            Case(
                name: "conflict: text/plain", path: "/dailyroundup/conflicts/1/resolve", body: raw(#"{"choice":"trello"}"#), type: "text/plain",
                expect: .unsupportedMediaType),
            Case(name: "duplicate: id abc", path: "/dailyroundup/duplicates/abc/resolve", body: raw(#"{"action":"merge"}"#), expect: .notFound),
            Case(
                name: "duplicate: unknown id", path: "/dailyroundup/duplicates/999999/resolve", body: raw(#"{"action":"keep_both"}"#),
                expect: .notFound),
            Case(
                name: "duplicate: action delete", path: "/dailyroundup/duplicates/1/resolve", body: raw(#"{"action":"delete"}"#),
                expect: .unprocessableEntity),
            Case(name: "duplicate: action missing", path: "/dailyroundup/duplicates/1/resolve", body: raw("{}"), expect: .unprocessableEntity),
            Case(name: "duplicate: action a bool", path: "/dailyroundup/duplicates/1/resolve", body: raw(#"{"action":true}"#), expect: .badRequest),
            Case(
                name: "duplicate: unknown field", path: "/dailyroundup/duplicates/1/resolve", body: raw(#"{"action":"merge","force":true}"#),
                expect: .unprocessableEntity),
            Case(
                name: "duplicate: form-encoded", path: "/dailyroundup/duplicates/1/resolve", body: raw("action=merge"),
                type: "application/x-www-form-urlencoded", expect: .unsupportedMediaType),
        ]
        // Paths.
        let pathCases: [Case] = [
            Case(name: "unknown path", method: .GET, path: "/dailyroundup/nothing-here", expect: .notFound),
            Case(name: "encoded traversal to /etc/passwd", method: .GET, path: "/dailyroundup/%2e%2e/%2e%2e/etc/passwd", expect: .notFound),
        ]
        let cases: [Case] = [
            authCases, accountCases, listCases, deviceCases, queryCases, ackOneCases,
            ackManyCases, syncCases, changeCases, reviewCases, pathCases,
        ].flatMap { $0 }
        #expect(cases.count >= 40)

        for c in cases {
            let (status, contentType, text) = try await send(api, c, token: token)
            #expect(status == c.expect, "\(c.name): \(status) \(text.prefix(300))")
            #expect(status.code >= 400 && status.code < 500, "\(c.name): \(status)")
            #expect(contentType?.hasPrefix("application/json") == true, "\(c.name): content-type \(contentType ?? "none")")
            let error = (try? JSONParser.parse(Array(text.utf8)))?["error"]
            #expect(error?["code"]?.stringValue?.isEmpty == false, "\(c.name): \(text.prefix(300))")
            #expect(error?["message"]?.stringValue?.isEmpty == false, "\(c.name): \(text.prefix(300))")
            #expect(try await jobStreamLength(api) == before.jobStream, "\(c.name) queued a job")
        }

        // The API still answers.
        #expect(try await api.call(.GET, "/healthz", token: nil).status == .ok)
        #expect(try await api.call(.GET, "/dailyroundup/account", token: token).status == .ok)

        // Nothing any rejected request did is left behind.
        let after = try await snapshot(api, account: account)
        #expect(after.lists == before.lists)
        #expect(after.changes == before.changes)
        #expect(after.devices == before.devices)
        #expect(after.conflicts == before.conflicts)
        #expect(after.duplicates == before.duplicates)
        #expect(after.account == before.account)
        #expect(after.accounts == before.accounts)
        #expect(after.jobs == before.jobs)
        #expect(after.jobStream == before.jobStream)
        #expect(after.webhookSecrets == before.webhookSecrets)

        // The control: the change the sync cases were built from is valid, so each was rejected for its one fault.
        let valid = try await api.call(.POST, syncPath, token: token, body: String(decoding: sync([change()]), as: UTF8.self))
        #expect(valid.status == .accepted, "\(valid.body)")
        #expect(try await jobStreamLength(api) == before.jobStream + 1)
    }
}

extension APIBadInputTests {
    /// Length limits count characters (grapheme clusters), and one character can hold any number of combining marks: a
    /// 200-character `reminder_id` could be hundreds of KB, past PostgreSQL's index entry limit. Every bounded string is
    /// also bounded in bytes of UTF-8: refused with 422 naming the field and both bounds, nothing
    /// stored; the same number of characters of one code point each still passes.
    @Test(arguments: StoreBackend.available) func boundedStringsAreBoundedInBytesToo(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: APITests.bootstrap) { api in
            let created = try await api.call(.POST, "/dailyroundup/account", token: APITests.bootstrap)
            let account = try #require(created.json["account_id"]?.stringValue)
            let token = try #require(created.json["auth_token"]?.stringValue)
            let list = try await api.store.createSyncList(accountID: account, name: "Errands", trelloBoardID: "B1", trelloListID: "L1")
            let before = try await snapshot(api, account: account)

            // "e" and 12 combining marks: one character of 25 bytes.
            let heavy = "e" + String(repeating: "\u{301}\u{302}\u{303}\u{304}\u{306}\u{307}", count: 2)
            #expect(heavy.count == 1 && heavy.utf8.count == 25)
            func heavyText(_ characters: Int) -> JSONValue { .string(String(repeating: heavy, count: characters)) }
            func change(reminder: JSONValue) -> JSONValue {
                .object([
                    "op": "create", "sync_list_id": .string(list.id), "reminder_id": reminder, "fields": .object(["title": "Stamps"]),
                    "modified_at": "2026-11-23T09:00:00Z",
                ])
            }
            func sync(_ reminder: JSONValue, device: JSONValue = "iphone-1") -> String {
                JSONValue.object(["device_id": device, "changes": .array([change(reminder: reminder)])]).canonicalJSON
            }
            func refused(_ response: InProcessAPI.Response, naming field: String, _ bound: String, sourceLocation: SourceLocation = #_sourceLocation)
            {
                let message = response.json["error"]?["message"]?.stringValue ?? ""
                #expect(
                    response.status == .unprocessableEntity, "\(field): \(response.status) \(response.body.prefix(300))",
                    sourceLocation: sourceLocation)
                #expect(response.json["error"]?["code"] == "unprocessable", sourceLocation: sourceLocation)
                #expect(message.hasPrefix(field + " is longer than") && message.contains(bound), "\(message)", sourceLocation: sourceLocation)
            }

            // The reminder id of 200 characters, 5,000 bytes: refused for its bytes, the field named with its change.
            let reminder = heavyText(200)
            #expect(reminder.stringValue?.count == 200)
            refused(
                try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync(reminder)), naming: "changes[0].reminder_id", "1024 bytes")
            // The same in acks (one by one, and in a batch, where it had no bound at all).
            let ack = JSONValue.object(["reminder_id": reminder]).canonicalJSON
            refused(try await api.call(.POST, "/dailyroundup/changes/99999999999/ack", token: token, body: ack), naming: "reminder_id", "1024 bytes")
            let acks = JSONValue.object(["acks": .array([.object(["id": .number(99_999_999_999), "reminder_id": reminder])])]).canonicalJSON
            refused(try await api.call(.POST, "/dailyroundup/changes/ack", token: token, body: acks), naming: "acks[0].reminder_id", "1024 bytes")
            // Device ids (in a sync and a registration) and a list's name.
            refused(
                try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync("R-1", device: heavyText(200))), naming: "device_id",
                "800 bytes")
            let device = JSONValue.object([
                "device_id": heavyText(200), "apns_token": .string(String(repeating: "0f", count: 32)), "platform": "macos",
                "environment": "production",
            ])
            refused(try await api.call(.POST, "/dailyroundup/devices", token: token, body: device.canonicalJSON), naming: "device_id", "800 bytes")
            let pairing = JSONValue.object(["name": heavyText(200), "trello_board_id": "B9", "trello_list_id": "L9"])
            refused(try await api.call(.POST, "/dailyroundup/lists", token: token, body: pairing.canonicalJSON), naming: "name", "2048 bytes")
            // An APNs token of full-width hex digits (`Character.isHexDigit` takes them; 3 bytes each).
            let fullWidth = String(repeating: "\u{FF10}\u{FF46}", count: 32)
            let wide = JSONValue.object(["device_id": "mac-1", "apns_token": .string(fullWidth), "platform": "macos", "environment": "production"])
            let wideAnswer = try await api.call(.POST, "/dailyroundup/devices", token: token, body: wide.canonicalJSON)
            #expect(wideAnswer.status == .unprocessableEntity, "\(wideAnswer.body)")

            // Nothing was stored or queued.
            let after = try await snapshot(api, account: account)
            #expect(after.devices == before.devices && after.changes == before.changes && after.lists == before.lists)
            #expect(after.jobs == before.jobs && after.jobStream == before.jobStream)

            // One more character is still refused for its characters; 200 characters of one code point each (800 bytes
            // of emoji) pass, so the bytes bound refuses only what the characters bound let through.
            refused(
                try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync(.string(String(repeating: "r", count: 201)))),
                naming: "changes[0].reminder_id", "200 characters")
            let emoji = JSONValue.string(String(repeating: "\u{1F600}", count: 200))
            let accepted = try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync(emoji))
            #expect(accepted.status == .accepted, "\(accepted.body.prefix(300))")
        }
    }
}

@Suite struct TransportErrorTextTests {
    /// AsyncHTTPClient's header error quotes the header's value; the Authorization header holds the Trello key and token.
    @Test func aTransportErrorNeverCarriesTheRequestsHeaders() {
        let error = HTTPClientError.invalidHeaderFieldValues([#"OAuth oauth_consumer_key="key-123", oauth_token="secret-456""#])
        let text = TrelloClient.describe(error)
        #expect(text == "HTTPClientError.invalidHeaderFieldValues")
        #expect(!text.contains("secret-456") && !text.contains("key-123"))
    }
}
