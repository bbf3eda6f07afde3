import Foundation
import NIOHTTP1
import RoundupCore
import RoundupStore
import RoundupTesting
import Testing

/// Per-account isolation, endpoint by endpoint of docs/openapi.yaml: account B's token reaches nothing of account A's
/// (every operation that names an id answers as if the id did not exist), and without a valid token nothing at all.
/// Against the API's router in this process (`InProcessAPI`).
@Suite(.serialized) struct IsolationTests {
    static let bootstrap = "bootstrap-0123456789abcdef"
    static let secretTitle = "secret plans of A"

    /// Everything account A owns, by id.
    struct Owned: Sendable {
        let account: String
        let token: String
        let listID: String
        let changeID: Int64
        let deviceID: String
        let conflictID: Int64
        let duplicateID: Int64
        let jobID: String
        let cards: [String]
    }

    /// A's state as the store holds it.
    struct Snapshot: Equatable, Sendable {
        var lists: [SyncListRecord]
        var changes: [PendingChange]
        var devices: [DeviceRecord]
        var conflicts: [ConflictRecord]
        var conflict: ConflictDetail?
        var duplicates: [DuplicateRecord]
        var duplicate: DuplicateDetail?
        var job: SyncJob?
        var account: AccountDetails?
        var tasks: [SyncTaskRecord?]
    }

    static func snapshot(_ store: any ServerStore, _ a: Owned) async throws -> Snapshot {
        var tasks: [SyncTaskRecord?] = []
        for card in a.cards { tasks.append(try await store.task(accountID: a.account, cardID: card)) }
        return Snapshot(
            lists: try await store.syncLists(accountID: a.account),
            changes: try await store.pendingChanges(accountID: a.account, afterID: 0, limit: 500),
            devices: try await store.devices(accountID: a.account),
            conflicts: try await store.conflicts(accountID: a.account),
            conflict: try await store.conflict(accountID: a.account, id: a.conflictID),
            duplicates: try await store.duplicates(accountID: a.account),
            duplicate: try await store.duplicate(accountID: a.account, id: a.duplicateID),
            job: try await store.job(accountID: a.account, id: a.jobID),
            account: try await store.accountDetails(id: a.account),
            tasks: tasks)
    }

    /// The `code` docs/openapi.yaml gives for each error status this test expects.
    static func errorCode(_ status: HTTPResponseStatus) -> String {
        switch status {
        case .notFound: "not_found"
        case .unprocessableEntity: "unprocessable"
        case .unauthorized: "unauthorized"
        default: "unexpected status \(status.code)"
        }
    }

    /// The response is exactly the error the API promises: this status, and `{"error": {"code", "message"}}`.
    static func expectError(_ response: InProcessAPI.Response, _ status: HTTPResponseStatus, _ label: String) {
        #expect(response.status == status, "\(label): \(response.status.code) \(response.body)")
        #expect(!(200..<300).contains(response.status.code) && response.status.code < 500, "\(label): \(response.status.code)")
        #expect(response.json["error"]?["code"]?.stringValue == errorCode(status), "\(label): \(response.body)")
        #expect(response.json["error"]?["message"]?.stringValue?.isEmpty == false, "\(label): \(response.body)")
    }

    /// Every number anywhere in a JSON value.
    static func numbers(in value: JSONValue) -> [Double] {
        switch value {
        case .number(let n): [n]
        case .array(let items): items.flatMap { numbers(in: $0) }
        case .object(let members): members.values.flatMap { numbers(in: $0) }
        default: []
        }
    }

    static func syncBody(_ changes: [[String: JSONValue]]) -> String {
        JSONValue.object(["device_id": "phone-of-b", "changes": .array(changes.map(JSONValue.object))]).canonicalJSON
    }

    static func deviceBody(_ id: String, apns: String) -> String {
        #"{"device_id":"\#(id)","apns_token":"\#(String(repeating: apns, count: 32))","platform":"ios","environment":"sandbox"}"#
    }

    @Test(arguments: StoreBackend.available) func anotherAccountsTokenReachesNothingOfTheAccount(backend: StoreBackend) async throws {
        try await InProcessAPI.run(store: backend, bootstrapToken: Self.bootstrap) { api in try await Self.isolation(api) }
    }

    static func isolation(_ api: InProcessAPI) async throws {
        let (accountA, tokenA) = try await api.createAccount(bootstrap: Self.bootstrap)
        let (accountB, tokenB) = try await api.createAccount(bootstrap: Self.bootstrap)

        // 1. A gets one of everything: a list, a pending change, a device, a conflict, a duplicate and a queued sync job.
        let store = api.store
        let list = try await store.createSyncList(accountID: accountA, name: "List of A", trelloBoardID: "BoardOfA", trelloListID: "ListOfA")
        _ = try await store.apply([
            CardObservation(
                accountID: accountA, syncListID: list.id, cardID: "CardOfA1", actionID: "ActionOfA", actionDate: Date(),
                kind: .fields(["title": .string(Self.secretTitle)], full: true))
        ])
        let change = try #require(try await store.pendingChanges(accountID: accountA, afterID: 0, limit: 10).first)
        let device = try await api.call(.POST, "/dailyroundup/devices", token: tokenA, body: Self.deviceBody("phone-of-a", apns: "ab"))
        #expect(device.status == .created, "\(device.body)")
        var write = SyncWrite(accountID: accountA, syncListID: list.id, cardID: "CardOfA2", reminderID: "reminder-of-a-conflict")
        write.conflicts = [NewConflict(field: "title", trelloValue: "title of A (Trello)", remindersValue: "title of A (app)")]
        let conflictID = try #require(try await store.recordSyncWrite(write).first)
        let duplicateID = try await store.addDuplicate(
            accountID: accountA,
            NewDuplicate(
                syncListID: list.id, reminderID: "reminder-of-a-duplicate", cardID: "CardOfA1", title: Self.secretTitle, dueDate: nil,
                fields: ["title": .string(Self.secretTitle)], jobID: nil))
        let item = SyncItem(
            op: .update, syncListID: list.id, reminderID: "reminder-of-a-conflict", trelloCardID: "CardOfA2",
            fields: ["title": "title of A (app)"], changedFields: ["title"], modifiedAt: Date())
        let submission = try await store.submitJob(
            accountID: accountA, kind: .sync, deviceID: "phone-of-a", idempotencyKey: "key-of-a", payload: .array([item.json]), total: 1,
            staleAfter: 3600)
        guard case .created(let job) = submission else { throw StackError("A's job was not created: \(submission)") }
        let a = Owned(
            account: accountA, token: tokenA, listID: list.id, changeID: change.id, deviceID: "phone-of-a", conflictID: conflictID,
            duplicateID: duplicateID, jobID: job.id, cards: ["CardOfA1", "CardOfA2"])
        // B has a list of its own, so a sync naming A's card in it is valid in every respect but ownership.
        let listOfB = try await store.createSyncList(accountID: accountB, name: "List of B", trelloBoardID: "BoardOfB", trelloListID: "ListOfB")

        // 2. A's state before B tries anything.
        let before = try await Self.snapshot(store, a)
        #expect(before.lists.count == 1 && before.changes.count == 1 && before.devices.count == 1, "\(before)")
        #expect(before.conflicts.count == 1 && before.duplicates.count == 1 && before.job?.status == .queued, "\(before)")

        // 3. Every operation that names an id, with A's ids and B's token, and a body valid but for whose the id is.
        let modified = JSONValue.string(Timestamp.string(Date()))
        let createInA: [String: JSONValue] = [
            "op": "create", "sync_list_id": .string(a.listID), "reminder_id": "reminder-of-b-1",
            "fields": .object(["title": "errand of B"]), "modified_at": modified,
        ]
        let updateInA: [String: JSONValue] = [
            "op": "update", "sync_list_id": .string(a.listID), "reminder_id": "reminder-of-b-2", "trello_card_id": "CardOfA1",
            "fields": .object(["title": "renamed by B"]), "changed_fields": .array(["title"]), "modified_at": modified,
        ]
        let deleteInA: [String: JSONValue] = [
            "op": "delete", "sync_list_id": .string(a.listID), "reminder_id": "reminder-of-a-conflict", "modified_at": modified,
        ]
        let updateCardOfAInB: [String: JSONValue] = [
            "op": "update", "sync_list_id": .string(listOfB.id), "reminder_id": "reminder-of-b-3", "trello_card_id": "CardOfA1",
            "fields": .object(["title": "renamed by B"]), "changed_fields": .array(["title"]), "modified_at": modified,
        ]
        let completeCardOfAInB: [String: JSONValue] = [
            "op": "complete", "sync_list_id": .string(listOfB.id), "reminder_id": "reminder-of-b-4", "trello_card_id": "CardOfA2",
            "modified_at": modified,
        ]
        let listPath = "/dailyroundup/lists/\(a.listID)"
        let foreign: [(method: HTTPMethod, path: String, body: String?, status: HTTPResponseStatus)] = [
            (.GET, listPath, nil, .notFound),
            (.DELETE, listPath, nil, .notFound),
            (.POST, "\(listPath)/import", nil, .notFound),
            (.POST, "\(listPath)/reconcile", nil, .notFound),
            (.POST, "/dailyroundup/changes/\(a.changeID)/ack", nil, .notFound),
            (.POST, "/dailyroundup/changes/\(a.changeID)/ack", #"{"reminder_id":"reminder-of-b"}"#, .notFound),
            (.POST, "/dailyroundup/changes/ack", #"{"ids":[\#(a.changeID)]}"#, .notFound),
            (.POST, "/dailyroundup/changes/ack", #"{"acks":[{"id":\#(a.changeID)}]}"#, .notFound),
            (.POST, "/dailyroundup/changes/ack", #"{"acks":[{"id":\#(a.changeID),"reminder_id":"reminder-of-b"}]}"#, .notFound),
            (.GET, "/dailyroundup/sync/jobs/\(a.jobID)", nil, .notFound),
            (.DELETE, "/dailyroundup/devices/\(a.deviceID)", nil, .notFound),
            (.POST, "/dailyroundup/conflicts/\(a.conflictID)/resolve", #"{"choice":"trello"}"#, .notFound),
            (.POST, "/dailyroundup/conflicts/\(a.conflictID)/resolve", #"{"choice":"reminders"}"#, .notFound),
            (.POST, "/dailyroundup/conflicts/\(a.conflictID)/resolve", #"{"choice":"value","value":"title chosen by B"}"#, .notFound),
            (.POST, "/dailyroundup/duplicates/\(a.duplicateID)/resolve", #"{"action":"merge"}"#, .notFound),
            (.POST, "/dailyroundup/duplicates/\(a.duplicateID)/resolve", #"{"action":"keep_both"}"#, .notFound),
            // A foreign list or card in a sync batch is a validation error of the batch (422), as for an unknown one.
            (.POST, "/dailyroundup/sync", Self.syncBody([createInA]), .unprocessableEntity),
            (.POST, "/dailyroundup/sync", Self.syncBody([updateInA]), .unprocessableEntity),
            (.POST, "/dailyroundup/sync", Self.syncBody([deleteInA]), .unprocessableEntity),
            (.POST, "/dailyroundup/sync", Self.syncBody([updateCardOfAInB]), .unprocessableEntity),
            (.POST, "/dailyroundup/sync", Self.syncBody([completeCardOfAInB]), .unprocessableEntity),
        ]
        for (method, path, body, status) in foreign {
            let label = "\(method) \(path) \(body ?? "")"
            let response = try await api.call(method, path, token: tokenB, body: body)
            Self.expectError(response, status, label)
            #expect(!response.body.contains(a.account) && !response.body.contains(Self.secretTitle), "\(label) leaks A: \(response.body)")
        }

        // 4. B's listings show B's own data only: none of A's ids or values, as text or as numbers.
        let markers = [
            a.account, a.listID, a.deviceID, a.jobID, "ListOfA", "BoardOfA", "CardOfA1", "CardOfA2", "reminder-of-a-conflict",
            "reminder-of-a-duplicate", "title of A", Self.secretTitle, "key-of-a",
        ]
        let numbersOfA = [Double(a.changeID), Double(a.conflictID), Double(a.duplicateID)]
        // (path, member holding the collection, how many items B owns there; nil: the account itself)
        let listings: [(path: String, key: String, count: Int?)] = [
            ("/dailyroundup/lists", "lists", 1), ("/dailyroundup/changes", "changes", 0),
            ("/dailyroundup/changes?after_id=0&limit=500", "changes", 0),
            ("/dailyroundup/devices", "devices", 0), ("/dailyroundup/conflicts", "conflicts", 0), ("/dailyroundup/duplicates", "duplicates", 0),
            ("/dailyroundup/account", "account_id", nil), ("/dailyroundup/activity", "activity", 0),
            ("/dailyroundup/activity?trello_card_id=CardOfA1", "activity", 0), ("/dailyroundup/activity?sync_list_id=\(a.listID)", "activity", 0),
            ("/dailyroundup/activity?reminder_id=reminder-of-a-conflict", "activity", 0), ("/dailyroundup/account/export", "lists", 1),
        ]
        // A has a history of its own, so B's empty one means something.
        let historyOfA = try await api.call(.GET, "/dailyroundup/activity?trello_card_id=CardOfA1", token: a.token)
        #expect(historyOfA.json["activity"]?.arrayValue?.isEmpty == false, "\(historyOfA.body)")
        for (path, key, count) in listings {
            let response = try await api.call(.GET, path, token: tokenB)
            #expect(response.status == .ok, "GET \(path): \(response.body)")
            if let count {
                #expect(response.json[key]?.arrayValue?.count == count, "GET \(path): \(response.body)")
            } else {
                #expect(response.json[key]?.stringValue == accountB, "GET \(path): \(response.body)")
            }
            for marker in markers { #expect(!response.body.contains(marker), "GET \(path) shows A's \(marker): \(response.body)") }
            let numbers = Self.numbers(in: response.json)
            #expect(numbersOfA.allSatisfy { !numbers.contains($0) }, "GET \(path) shows one of A's ids: \(response.body)")
        }

        // 5. Without a valid account token, every operation on account data is 401: no token, a made-up one, A's token
        // with one character changed, and the bootstrap token (which is not an account token).
        let other: [(method: HTTPMethod, path: String, body: String?)] = [
            (.GET, "/dailyroundup/account", nil), (.PUT, "/dailyroundup/account", #"{"conflict_policy":"lww"}"#),
            (.DELETE, "/dailyroundup/account", nil), (.POST, "/dailyroundup/account/token", nil),
            (.GET, "/dailyroundup/lists", nil),
            (.POST, "/dailyroundup/lists", #"{"name":"x","trello_board_id":"BoardOfA","trello_list_id":"ListOfA"}"#),
            (.GET, "/dailyroundup/changes", nil), (.GET, "/dailyroundup/devices", nil),
            (.POST, "/dailyroundup/devices", Self.deviceBody("phone-of-a", apns: "ef")),
            (.GET, "/dailyroundup/conflicts", nil), (.GET, "/dailyroundup/duplicates", nil), (.GET, "/dailyroundup/activity", nil),
            (.GET, "/dailyroundup/account/export", nil),
        ]
        let authenticated: [(method: HTTPMethod, path: String, body: String?)] =
            foreign.map { (method: $0.method, path: $0.path, body: $0.body) } + other
        let tampered = String(a.token.dropLast()) + (a.token.hasSuffix("A") ? "B" : "A")
        let badTokens: [(name: String, token: String?)] = [
            ("no token", nil), ("a made-up token", "rt_madeUpTokenThatWasNeverIssued0123456789abc"), ("A's token altered", tampered),
            ("the bootstrap token", Self.bootstrap),
        ]
        for (method, path, body) in authenticated {
            for (name, token) in badTokens {
                Self.expectError(try await api.call(method, path, token: token, body: body), .unauthorized, "\(method) \(path) with \(name)")
            }
        }
        for (name, token) in badTokens.dropLast() {  // the bootstrap token would rightly create an account here
            Self.expectError(
                try await api.call(.POST, "/dailyroundup/account", token: token), .unauthorized, "POST /dailyroundup/account with \(name)")
        }

        // Ids are scoped by account, never global: A's Idempotency-Key does not replay A's job to B, and A's device_id
        // registered by B is a new device of B's (201, not an update of A's).
        let ownChange: [String: JSONValue] = [
            "op": "create", "sync_list_id": .string(listOfB.id), "reminder_id": "reminder-of-b-own",
            "fields": .object(["title": "errand of B"]), "modified_at": modified,
        ]
        let replay = try await api.call(
            .POST, "/dailyroundup/sync", token: tokenB, body: Self.syncBody([ownChange]), headers: ["Idempotency-Key": "key-of-a"])
        #expect(replay.status == .accepted, "\(replay.body)")
        let jobOfB = try #require(replay.json["job_id"]?.stringValue)
        #expect(jobOfB != a.jobID)
        Self.expectError(try await api.call(.GET, "/dailyroundup/sync/jobs/\(jobOfB)", token: a.token), .notFound, "GET B's job with A's token")
        let sameDeviceID = try await api.call(.POST, "/dailyroundup/devices", token: tokenB, body: Self.deviceBody(a.deviceID, apns: "cd"))
        #expect(sameDeviceID.status == .created, "\(sameDeviceID.body)")
        #expect(try await api.call(.DELETE, "/dailyroundup/devices/\(a.deviceID)", token: tokenB).status == .noContent)

        // 6. A's state is exactly as it was, and A's token still reaches all of it.
        let after = try await Self.snapshot(store, a)
        #expect(after.lists == before.lists, "lists")
        #expect(after.changes == before.changes, "pending changes")
        #expect(after.devices == before.devices, "devices")
        #expect(after.conflicts == before.conflicts, "conflicts")
        #expect(after.conflict == before.conflict, "conflict \(a.conflictID)")
        #expect(after.duplicates == before.duplicates, "duplicates")
        #expect(after.duplicate == before.duplicate, "duplicate \(a.duplicateID)")
        #expect(after.job == before.job, "job \(a.jobID)")
        #expect(after.account == before.account, "account details")
        #expect(after.tasks == before.tasks, "card mappings")
        #expect(after == before)

        let changes = try await api.call(.GET, "/dailyroundup/changes", token: a.token)
        #expect(changes.json["changes"]?.arrayValue?.compactMap { $0["id"]?.numberValue } == [Double(a.changeID)], "\(changes.body)")
        let ownList = try await api.call(.GET, listPath, token: a.token)
        #expect(ownList.status == .ok && ownList.json["sync_list_id"]?.stringValue == a.listID, "\(ownList.body)")
        let ownJob = try await api.call(.GET, "/dailyroundup/sync/jobs/\(a.jobID)", token: a.token)
        #expect(ownJob.status == .ok && ownJob.json["job_id"]?.stringValue == a.jobID, "\(ownJob.body)")
        let devices = try await api.call(.GET, "/dailyroundup/devices", token: a.token)
        #expect(devices.json["devices"]?.arrayValue?.compactMap { $0["device_id"]?.stringValue } == [a.deviceID], "\(devices.body)")
        let conflicts = try await api.call(.GET, "/dailyroundup/conflicts", token: a.token)
        #expect(conflicts.json["conflicts"]?.arrayValue?.compactMap { $0["id"]?.numberValue } == [Double(a.conflictID)], "\(conflicts.body)")
        #expect(conflicts.json["conflicts"]?[0]?["status"] == "open", "\(conflicts.body)")
        let duplicates = try await api.call(.GET, "/dailyroundup/duplicates", token: a.token)
        #expect(duplicates.json["duplicates"]?.arrayValue?.compactMap { $0["id"]?.numberValue } == [Double(a.duplicateID)], "\(duplicates.body)")
        #expect(duplicates.json["duplicates"]?[0]?["status"] == "open", "\(duplicates.body)")
    }
}
