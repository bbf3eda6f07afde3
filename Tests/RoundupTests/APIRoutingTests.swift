import Foundation
import HTTPTypes
import NIOHTTP1
import RoundupAPI
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

/// Hummingbird's routing as the API answers it, and the documents' shape, in this process (`InProcessAPI`).
@Suite(.serialized) struct APIRoutingTests {
    static let bootstrap = "bootstrap-routing-0123456789"

    @Test func unknownPathsAre404AndKnownPathsWithAnotherMethod405() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            // No token needed to learn a path does not exist, or which methods it has.
            for path in ["/", "/dailyroundup", "/dailyroundup/nothing-here", "/dailyroundup/lists/a/b/c", "/healthz/x"] {
                let response = try await api.call(.GET, path, token: nil)
                #expect(response.status == .notFound, "\(path): \(response.body)")
                #expect(response.contentType == "application/json")
                #expect(response.json["error"]?["code"] == "not_found", "\(path): \(response.body)")
            }
            let cases: [(HTTPMethod, String, Set<String>)] = [
                (.PATCH, "/dailyroundup/lists", ["GET", "POST"]),
                (.PATCH, "/dailyroundup/lists/abc", ["GET", "PUT", "DELETE"]),
                (.GET, "/dailyroundup/changes/1/ack", ["POST"]),
                (.DELETE, "/dailyroundup/devices/", ["GET", "POST"]),
                (.POST, "/healthz", ["GET"]),
                (.HEAD, "/dailyroundup/account", ["GET", "POST", "PUT", "DELETE"]),
                (.RAW(value: "BREW"), "/dailyroundup/sync", ["POST"]),
            ]
            for (method, path, allowed) in cases {
                let response = try await api.call(method, path, token: nil)
                #expect(response.status == .methodNotAllowed, "\(method) \(path): \(response.body)")
                let allow = Set((response.headers[.allow] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
                #expect(allow == allowed, "\(method) \(path): Allow \(response.headers[.allow] ?? "none")")
                #expect(response.json["error"]?["code"] == "method_not_allowed", "\(response.body)")
            }
        }
    }

    @Test func everyResponseCarriesARequestIDThatErrorBodiesRepeat() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let requestID = HTTPField.Name("X-Request-Id")!
            let (_, token) = try await api.createAccount(bootstrap: Self.bootstrap)
            // Answers of every kind carry one, and no two requests share it.
            var seen = Set<String>()
            for (method, path, auth) in [
                (HTTPMethod.GET, "/healthz", nil), (.GET, "/dailyroundup/changes", token), (.GET, "/dailyroundup/nothing", nil),
                (.DELETE, "/healthz", nil), (.GET, "/dailyroundup/account", "wrong-token"),
            ] as [(HTTPMethod, String, String?)] {
                let response = try await api.call(method, path, token: auth)
                let id = try #require(response.headers[requestID], "\(method) \(path)")
                #expect(!seen.contains(id))
                seen.insert(id)
                if response.status.code >= 400 {
                    #expect(response.json["error"]?["request_id"] == .string(id), "\(response.body)")
                }
            }
            // A sane id from the client (or its proxy) is kept; anything else is replaced.
            let kept = try await api.call(.GET, "/dailyroundup/lists/unknown", token: token, headers: ["X-Request-Id": "ios-2f9c.17:3"])
            #expect(kept.status == .notFound && kept.headers[requestID] == "ios-2f9c.17:3")
            #expect(kept.json["error"]?["request_id"] == "ios-2f9c.17:3")
            for bad in [String(repeating: "a", count: 129), "has space", "semi;colon", "ünï"] {
                let replaced = try await api.call(.GET, "/healthz", token: nil, headers: ["X-Request-Id": bad])
                let id = try #require(replaced.headers[requestID])
                #expect(id != bad && UUID(uuidString: id) != nil, "\(bad) -> \(id)")
            }
        }
    }

    @Test func documentsNameEveryMemberAndKeepTheirTypes() async throws {
        try await InProcessAPI.run(bootstrapToken: Self.bootstrap) { api in
            let (account, token) = try await api.createAccount(bootstrap: Self.bootstrap)
            let store = api.store

            // Unset members are null, never absent; the body is application/json without a charset.
            let details = try await api.call(.GET, "/dailyroundup/account", token: token)
            #expect(details.status == .ok && details.contentType == "application/json")
            let object = try #require(details.json.objectValue)
            #expect(
                Set(object.keys) == [
                    "account_id", "trello_api_key", "trello_token", "trello_webhook_secret", "conflict_policy", "delete_mode", "created_at",
                    "updated_at", "needs_attention", "time_zone",
                ])
            #expect(object["trello_api_key"] == .null && object["needs_attention"] == .null)
            #expect(object["conflict_policy"] == "manual" && object["delete_mode"] == "archive", "\(details.body)")
            #expect(object["time_zone"] == "UTC", "\(details.body)")
            // Keys sorted, slashes as they are: the bytes the API always wrote.
            #expect(details.body.hasPrefix(#"{"account_id":""#), "\(details.body)")

            let list = try await store.createSyncList(accountID: account, name: "Errands/Home", trelloBoardID: "B1", trelloListID: "L1")
            let listed = try await api.call(.GET, "/dailyroundup/lists/\(list.id)", token: token)
            #expect(listed.json["last_reconciled_at"] == .null && listed.json["last_reconcile_error"] == .null, "\(listed.body)")
            #expect(listed.body.contains(#""name":"Errands/Home""#), "\(listed.body)")

            // The spliced page of changes has the shape of `ChangePage`; ids are integers.
            _ = try await store.apply([
                CardObservation(
                    accountID: account, syncListID: list.id, cardID: "C1", actionID: "A1", actionDate: Date(),
                    kind: .fields(["title": "Stamps"], full: true))
            ])
            let changes = try await api.call(.GET, "/dailyroundup/changes", token: token)
            let page = try JSONDecoder().decode(ChangePage.self, from: Data(changes.body.utf8))
            #expect(page.changes.count == 1 && page.changes[0].changeType == .create && page.changes[0].reminderID == nil && !page.hasMore)
            #expect(changes.body.contains(#""reminder_id":null"#) && changes.body.contains(#"{"id":\#(page.changes[0].id),"#), "\(changes.body)")
            let acked = try await api.call(.POST, "/dailyroundup/changes/\(page.changes[0].id)/ack", token: token, body: #"{"reminder_id":"R-1"}"#)
            #expect(acked.status == .ok && acked.body == #"{"acked":[\#(page.changes[0].id)]}"#, "\(acked.body)")

            // A device: 201 when new, 200 when registered again, the token masked.
            let device = #"{"device_id":"phone-1","apns_token":"\#(String(repeating: "ab", count: 32))","platform":"ios","environment":"sandbox"}"#
            let first = try await api.call(.POST, "/dailyroundup/devices", token: token, body: device)
            #expect(first.status == .created && first.json["platform"] == "ios" && first.json["apns_token"]?.stringValue?.hasSuffix("abab") == true)
            #expect(try await api.call(.POST, "/dailyroundup/devices", token: token, body: device).status == .ok)

            // A job: 202 with its id and total; read back with every member, `error` null while none.
            let sync =
                #"{"device_id":"phone-1","changes":[{"op":"create","sync_list_id":"\#(list.id)","reminder_id":"R-2","fields":{"title":"Milk"},"modified_at":"2026-11-23T09:00:00Z"}]}"#
            let started = try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync)
            #expect(started.status == .accepted, "\(started.body)")
            #expect(started.json["status"] == "running" && started.json["total"] == .number(1), "\(started.body)")
            let jobID = try #require(started.json["job_id"]?.stringValue)
            let job = try await api.call(.GET, "/dailyroundup/sync/jobs/\(jobID)", token: token)
            #expect(
                Set(try #require(job.json.objectValue).keys) == [
                    "job_id", "kind", "status", "processed", "total", "results", "error", "created_at", "updated_at",
                ])
            #expect(job.json["kind"] == "sync" && job.json["error"] == .null && job.json["processed"] == .number(0), "\(job.body)")
            // Another while it is queued: 409 job_running, with its id and Retry-After.
            let busy = try await api.call(.POST, "/dailyroundup/sync", token: token, body: sync)
            #expect(busy.status == .conflict && busy.headers[.retryAfter] == "2", "\(busy.body)")
            #expect(busy.json["error"]?["code"] == "job_running" && busy.json["error"]?["job_id"]?.stringValue == jobID, "\(busy.body)")

            // Without a token: 401 with WWW-Authenticate, before the route's own checks.
            let anonymous = try await api.call(.GET, "/dailyroundup/sync/jobs/\(jobID)", token: nil)
            #expect(anonymous.status == .unauthorized && anonymous.headers[.wwwAuthenticate] == "Bearer")
        }
    }
}
