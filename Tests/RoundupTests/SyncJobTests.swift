import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// One account with one synced list, driven over the real API.
struct SyncSetup: Sendable {
    let stack: Stack
    let account: String
    let token: String
    let listID: String
    let trelloList: String
    let board: String

    static let bootstrap = "bootstrap-0123456789abcdef"

    static func make(
        _ stack: Stack, list trelloList: String, board: String, policy: String? = nil, trelloToken: String = "test-token",
        listSettings: JSONValue? = nil
    ) async throws -> SyncSetup {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: bootstrap)
        #expect(created.status == .created, "\(created.body)")
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let secret = stack.trello.webhookSecret
        var settings: [String: JSONValue] = [
            "trello_api_key": "test-api-key", "trello_token": .string(trelloToken), "trello_webhook_secret": .string(secret),
        ]
        if let policy { settings["conflict_policy"] = .string(policy) }
        let put = try await stack.callAPI(.PUT, "/dailyroundup/account", token: token, body: JSONValue.object(settings).canonicalJSON)
        #expect(put.status == .ok, "\(put.body)")
        stack.trello.addList(id: trelloList, boardID: board)
        var pairing: [String: JSONValue] = ["name": "Errands", "trello_board_id": .string(board), "trello_list_id": .string(trelloList)]
        if let listSettings { pairing["settings"] = listSettings }
        let list = try await stack.callAPI(.POST, "/dailyroundup/lists", token: token, body: JSONValue.object(pairing).canonicalJSON)
        #expect(list.status == .created, "\(list.body)")
        return SyncSetup(
            stack: stack, account: account, token: token, listID: try #require(list.json["sync_list_id"]?.stringValue), trelloList: trelloList,
            board: board)
    }

    func change(
        _ op: String, reminder: String, fields: [String: JSONValue] = [:], changed: [String]? = nil, modified: Date = Date(), card: String? = nil
    ) -> JSONValue {
        var object: [String: JSONValue] = [
            "op": .string(op), "sync_list_id": .string(listID), "reminder_id": .string(reminder), "fields": .object(fields),
            "modified_at": .string(Timestamp.string(modified)),
        ]
        if let changed { object["changed_fields"] = .array(changed.map(JSONValue.string)) }
        if let card { object["trello_card_id"] = .string(card) }
        return .object(object)
    }

    func post(_ changes: [JSONValue], device: String = "iphone-1", key: String? = nil) async throws -> Stack.Response {
        let body = JSONValue.object(["device_id": .string(device), "changes": .array(changes)]).canonicalJSON
        return try await stack.callAPI(.POST, "/dailyroundup/sync", token: token, body: body, headers: key.map { ["Idempotency-Key": $0] } ?? [:])
    }

    /// Posts and waits for the job to end (retrying while another job of the account runs); returns the job.
    func sync(_ changes: [JSONValue], timeout: Duration = .seconds(90)) async throws -> JSONValue {
        let deadline = ContinuousClock.now + timeout
        while true {
            let response = try await post(changes)
            if response.status == .conflict, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
                continue
            }
            #expect(response.status == .accepted, "\(response.body)")
            let id = try #require(response.json["job_id"]?.stringValue)
            return try await wait(job: id, timeout: timeout)
        }
    }

    /// Until the job has ended (neither queued nor running).
    func wait(job id: String, timeout: Duration = .seconds(90)) async throws -> JSONValue {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let response = try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: token)
            #expect(response.status == .ok, "\(response.body)")
            if let status = response.json["status"]?.stringValue, status != "queued", status != "running" { return response.json }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw StackError("job \(id) still queued or running after \(timeout)")
    }

    /// The account's pending changes, oldest first.
    func changes() async throws -> [JSONValue] {
        let response = try await stack.callAPI(.GET, "/dailyroundup/changes?limit=500", token: token)
        #expect(response.status == .ok)
        return response.json["changes"]?.arrayValue ?? []
    }

    func ack(_ changes: [JSONValue], reminders: [String: String] = [:]) async throws {
        guard !changes.isEmpty else { return }
        let acks = changes.map { change -> JSONValue in
            let id = change["id"]!
            if let card = change["trello_card_id"]?.stringValue, let reminder = reminders[card] {
                return .object(["id": id, "reminder_id": .string(reminder)])
            }
            return .object(["id": id])
        }
        let response = try await stack.callAPI(
            .POST, "/dailyroundup/changes/ack", token: token, body: JSONValue.object(["acks": .array(acks)]).canonicalJSON)
        #expect(response.status == .ok, "\(response.body)")
    }
}

extension JSONValue {
    subscript(index: Int) -> JSONValue? {
        guard let array = arrayValue, array.indices.contains(index) else { return nil }
        return array[index]
    }

    var numberValue: Double? {
        if case .number(let n) = self { return n }
        return nil
    }
}

extension Stack {
    /// Until every webhook the fake Trello sent has been received and processed.
    func quiet() async throws {
        await trello.waitForWebhookDeliveries()
        let drained = try await TestSupport.eventually(timeout: .seconds(30)) {
            guard try await self.streamLength() == 0 else { return false }
            return try await self.redis.pendingCount(of: .webhooks, keys: self.keys) == 0
        }
        #expect(drained, "webhook stream did not drain")
    }
}

@Suite(.serialized) struct SyncJobTests {
    static let fast = ["ROUNDUP_JOB_STALE_SECONDS": "6", "ROUNDUP_JOB_HEARTBEAT_SECONDS": "1", "ROUNDUP_CLAIM_IDLE_MS": "3000"]

    func startStack(_ backend: StoreBackend, workers: Int = 1, extra: [String: String] = [:]) async throws -> Stack {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        for i in 1...workers { try await stack.startWorker(name: "w\(i)", extra: extra) }
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: extra)
        return stack
    }

    @Test(arguments: StoreBackend.available) func createUpdateCompleteAndDeleteReachTrelloWithMappingsAndNoEcho(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lcrud", board: "Bcrud")

        let created = try await s.sync([
            s.change("create", reminder: "R1", fields: ["title": "Milk", "notes": "2 litres", "due_date": "2026-11-23T09:00:00Z"]),
            s.change("create", reminder: "R2", fields: ["title": "Bread", "completed": false]),
        ])
        #expect(created["status"] == "completed", "\(created)")
        #expect(created["processed"] == .number(2) && created["total"] == .number(2))
        let results = try #require(created["results"]?.arrayValue)
        #expect(results.map { $0["status"] } == ["ok", "ok"] && results.map { $0["reminder_id"] } == ["R1", "R2"])
        let card1 = try #require(results[0]["trello_card_id"]?.stringValue)
        let card2 = try #require(results[1]["trello_card_id"]?.stringValue)
        let milk = try #require(stack.trello.cardValue(card1))
        #expect(milk["name"] == "Milk" && milk["desc"] == "2 litres" && milk["due"] == "2026-11-23T09:00:00.000Z" && milk["idList"] == "Lcrud")

        // Trello sent a webhook back for each write; none of them is a change for the apps. What they learn is each new
        // card's Trello page (they sent everything else).
        try await stack.quiet()
        #expect(stack.trello.webhooksSent >= 2)
        let told = try await s.changes()
        #expect(told.count == 2 && told.allSatisfy { $0["change_type"] == "update" && $0["changed_fields"] == .array(["trello_url"]) }, "\(told)")
        let pages = Set([card1, card2].compactMap { stack.trello.cardValue($0)?["shortUrl"]?.stringValue })
        #expect(pages.count == 2 && Set(told.compactMap { $0["fields"]?["trello_url"]?.stringValue }) == pages, "\(told)")
        try await s.ack(told)

        // Update by mapping (no card id given), complete, then archive and (after changing the setting) delete.
        let updated = try await s.sync([
            s.change("update", reminder: "R1", fields: ["title": "Oat milk"], changed: ["title"]),
            s.change("complete", reminder: "R2"),
        ])
        #expect(updated["results"]?.arrayValue?.map { $0["status"] } == ["ok", "ok"], "\(updated)")
        #expect(stack.trello.cardValue(card1)?["name"] == "Oat milk" && stack.trello.cardValue(card1)?["desc"] == "2 litres")
        #expect(stack.trello.cardValue(card2)?["dueComplete"] == .bool(true))
        let archived = try await s.sync([s.change("delete", reminder: "R1")])
        #expect(archived["results"]?[0]?["status"] == "ok")
        #expect(stack.trello.cardValue(card1)?["closed"] == .bool(true))
        let setting = try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"delete_mode":"delete"}"#)
        #expect(setting.status == .ok)
        let deleted = try await s.sync([s.change("delete", reminder: "R2")])
        #expect(deleted["results"]?[0]?["status"] == "ok")
        #expect(stack.trello.cardValue(card2) == nil)
        try await stack.quiet()
        #expect(try await s.changes().isEmpty, "our own writes came back as changes")

        // Resubmitting a finished delete is harmless; updating a deleted card is skipped, saying why (its delete is on
        // its way to the apps: nothing failed).
        let again = try await s.sync([
            s.change("delete", reminder: "R2"), s.change("update", reminder: "R1", fields: ["title": "x"], changed: ["title"]),
        ])
        #expect(again["results"]?[0]?["status"] == "ok")
        #expect(again["results"]?[1]?["status"] == "skipped")
        #expect(again["results"]?[1]?["reason"]?.stringValue?.contains("deleted") == true, "\(again)")
        #expect(stack.trello.cardsCreated == 2)
        // The worker's /metrics count what happened.
        let metrics = try await stack.get(port: stack.workerPorts["w1"] ?? 0, "/metrics").body
        #expect(metrics.contains(#"roundup_sync_jobs_total{kind="sync",status="completed"} 5"#), "\(metrics)")
        #expect(metrics.contains(#"roundup_sync_items_total{op="create",status="ok"} 2"#))
        #expect(metrics.contains(#"roundup_sync_items_total{op="update",status="skipped"} 1"#))
        #expect(metrics.contains("roundup_trello_requests_total{status=\"2xx\"}"))
        await stack.shutdown()
    }

    /// An app sends back a change it received with only the title edited: every other value it holds (an option of the
    /// board the server's list never knew, read-only labels, checklists) is ignored. A value of the right type that
    /// cannot be written fails its own item, naming the field; the others in the batch go through.
    @Test(arguments: StoreBackend.available) func aValueTheServerCannotWriteFailsOnlyItsItem(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        stack.trello.setPriorityField(boardID: "Bvalues", fieldID: "F1", options: [("o-urgent", "Urgent"), ("o-low", "Low")])
        let s = try await SyncSetup.make(stack, list: "Lvalues", board: "Bvalues")
        let made = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "First", "priority": "urgent"])])
        #expect(made["results"]?[0]?["status"] == "ok", "\(made)")
        let card = try #require(made["results"]?[0]?["trello_card_id"]?.stringValue)
        // The whole change as the app received it, with one field edited.
        let echoed: [String: JSONValue] = [
            "title": "First, renamed", "priority": "urgent", "labels": .array([.object(["id": "L1", "name": "Home", "color": "green"])]),
            "checklists": .array([]), "location": .null, "trello_url": "https://trello.com/c/abc",
        ]
        let result = try await s.sync([
            s.change("update", reminder: "R1", fields: echoed, changed: ["title"]),
            s.change("create", reminder: "R2", fields: ["title": "Bad link", "url": "javascript:alert(1)"]),
            s.change("create", reminder: "R3", fields: ["title": "Bad date", "due_date": "next tuesday"]),
            s.change("create", reminder: "R4", fields: ["title": "Unknown option", "priority": "someday"]),
            s.change("create", reminder: "R5", fields: ["title": " "]),
            s.change("create", reminder: "R6", fields: ["title": "Fine", "priority": "low", "labels": .array([])]),
        ])
        let results = result["results"]?.arrayValue ?? []
        #expect(results.count == 6, "\(result)")
        func item(_ n: Int) -> JSONValue? { results.count > n ? results[n] : nil }
        #expect(item(0)?["status"] == "ok", "\(result)")
        #expect(stack.trello.cardValue(card)?["name"] == "First, renamed")
        for (n, field) in [(1, "fields.url"), (2, "fields.due_date"), (3, "fields.priority"), (4, "fields.title")] {
            #expect(item(n)?["status"] == "error", "item \(n): \(result)")
            #expect(item(n)?["error"]?.stringValue?.hasPrefix(field) == true, "item \(n) names \(field): \(String(describing: item(n)))")
        }
        #expect(item(5)?["status"] == "ok", "\(result)")
        // No card was made for an item that failed on its value: each is checked before Trello is asked.
        #expect(stack.trello.openCards(inList: "Lvalues").compactMap { $0["name"]?.stringValue }.sorted() == ["Fine", "First, renamed"])
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func priorityMapsToTheBoardsDropdownAndUrlToALinkAttachment(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        stack.trello.setPriorityField(boardID: "Bprio", fieldID: "F1", options: [("o-low", "Low"), ("o-high", "High")])
        let s = try await SyncSetup.make(stack, list: "Lprio", board: "Bprio")
        let created = try await s.sync([
            s.change("create", reminder: "R1", fields: ["title": "File taxes", "priority": "high", "url": "https://example.com/forms"])
        ])
        #expect(created["results"]?[0]?["status"] == "ok", "\(created)")
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        let stored = try #require(stack.trello.cardValue(card))
        #expect(stored["customFieldItems"]?[0]?["idValue"] == "o-high", "\(stored)")
        #expect(stored["attachments"]?[0]?["url"] == "https://example.com/forms")
        // The apps learn what they did not send: the card's page, the option's level (the first of two: highest), the link's
        // attachment.
        try await stack.quiet()
        let told = try await s.changes()
        #expect(told.count == 1, "\(told)")
        #expect(told.first?["changed_fields"] == .array(["attachments", "priority_level", "trello_url"]), "\(told)")
        #expect(told.first?["fields"]?["priority_level"] == .number(1))
        #expect(told.first?["fields"]?["attachments"]?[0]?["url"] == "https://example.com/forms")
        try await s.ack(told)
        // The board's field was edited in Trello: the option ids we kept are stale, Trello rejects them, we read again.
        stack.trello.setPriorityField(boardID: "Bprio", fieldID: "F1", options: [("o-low-2", "Low"), ("o-high-2", "High")])
        let updated = try await s.sync([
            s.change("update", reminder: "R1", fields: ["priority": "low", "url": "https://example.com/v2"], changed: ["priority", "url"])
        ])
        #expect(updated["results"]?[0]?["status"] == "ok", "\(updated)")
        let after = try #require(stack.trello.cardValue(card))
        #expect(after["customFieldItems"]?[0]?["idValue"] == "o-low-2", "\(after)")
        #expect(after["attachments"]?.arrayValue?.compactMap { $0["url"]?.stringValue } == ["https://example.com/v2"])
        let unknown = try await s.sync([s.change("update", reminder: "R1", fields: ["priority": "medium"], changed: ["priority"])])
        #expect(unknown["results"]?[0]?["status"] == "error")
        #expect(unknown["results"]?[0]?["error"]?.stringValue?.contains("medium") == true)
        try await stack.quiet()
        // Our own priority and link writes never come back as changes; the apps learn only what changed with them.
        let after2 = try await s.changes()
        #expect(after2.count == 1 && after2.first?["changed_fields"] == .array(["attachments", "priority_level"]), "\(after2)")
        #expect(after2.first?["fields"]?["priority_level"] == .number(9), "low is the lowest of the board's two options")
        #expect(after2.first?["fields"]?["attachments"]?.arrayValue?.compactMap { $0["url"]?.stringValue } == ["https://example.com/v2"])
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func badSyncRequestsAreRejectedBeforeAnyJobAndIdempotencyKeysReplay(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lbad", board: "Bbad")
        func expect(_ changes: [JSONValue], _ status: HTTPResponseStatus, mentioning: String, line: Int = #line) async throws {
            let response = try await s.post(changes)
            #expect(response.status == status, "line \(line): \(response.body)")
            #expect(response.json["error"]?["message"]?.stringValue?.contains(mentioning) == true, "line \(line): \(response.body)")
        }
        try await expect([s.change("update", reminder: "R1", fields: ["title": "x"])], .unprocessableEntity, mentioning: "changed_fields")
        try await expect([s.change("create", reminder: "R1", fields: ["notes": "no title"])], .unprocessableEntity, mentioning: "title")
        try await expect([s.change("create", reminder: "R1", fields: ["title": "x", "colour": "red"])], .unprocessableEntity, mentioning: "colour")
        try await expect(
            [s.change("create", reminder: "R1", fields: ["title": "x", "due_date": .number(3)])], .unprocessableEntity,
            mentioning: "changes[0].fields.due_date")
        try await expect(
            [s.change("update", reminder: "R1", fields: ["title": "x"], changed: ["labels"])], .unprocessableEntity, mentioning: "labels")
        try await expect([s.change("create", reminder: "R1", fields: ["title": .number(3)])], .unprocessableEntity, mentioning: "title")
        try await expect(
            [s.change("create", reminder: "R1", fields: ["title": "x"]), s.change("erase", reminder: "R2")], .unprocessableEntity,
            mentioning: "changes[1].op")
        try await expect(
            [s.change("update", reminder: "R1", fields: ["title": "x"], changed: ["title"], card: "no-such-card")], .unprocessableEntity,
            mentioning: "trello_card_id")
        var foreign = s.change("create", reminder: "R1", fields: ["title": "x"]).objectValue!
        foreign["sync_list_id"] = "another-accounts-list"
        try await expect([.object(foreign)], .unprocessableEntity, mentioning: "sync_list_id")
        try await expect([], .unprocessableEntity, mentioning: "empty")
        try await expect(
            Array(repeating: s.change("create", reminder: "R", fields: ["title": "x"]), count: 501), .unprocessableEntity, mentioning: "500")
        let notArray = try await stack.callAPI(.POST, "/dailyroundup/sync", token: s.token, body: #"{"device_id":"d","changes":{}}"#)
        #expect(notArray.status == .badRequest)
        // Nothing was started by any of them.
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.jobStream)).int ?? 0 == 0)
        #expect(stack.trello.cardsCreated == 0)

        // The same Idempotency-Key gives the same job and makes one card.
        let first = try await s.post([s.change("create", reminder: "R9", fields: ["title": "Stamps"])], key: "key-1")
        let second = try await s.post([s.change("create", reminder: "R9", fields: ["title": "Stamps"])], key: "key-1")
        #expect(first.status == .accepted && second.status == .accepted)
        #expect(first.json["job_id"] == second.json["job_id"])
        _ = try await s.wait(job: try #require(first.json["job_id"]?.stringValue))
        #expect(stack.trello.cardsCreated == 1)

        // While a job runs (Trello is slow), a second one is refused with the running job's id.
        stack.trello.setCardDelay(.seconds(2))
        let slow = try await s.post([s.change("update", reminder: "R9", fields: ["notes": "first class"], changed: ["notes"])])
        #expect(slow.status == .accepted)
        let busy = try await s.post([s.change("update", reminder: "R9", fields: ["notes": "second class"], changed: ["notes"])])
        #expect(busy.status == .conflict, "\(busy.body)")
        #expect(busy.json["error"]?["code"] == "job_running" && busy.json["error"]?["job_id"] == slow.json["job_id"])
        stack.trello.setCardDelay(.zero)
        let done = try await s.wait(job: try #require(slow.json["job_id"]?.stringValue))
        #expect(done["status"] == "completed")
        let other = try await stack.callAPI(
            .GET, "/dailyroundup/sync/jobs/\(slow.json["job_id"]!.stringValue!)",
            token: (try await SyncSetup.make(stack, list: "Lbad2", board: "Bbad2")).token)
        #expect(other.status == .notFound)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func oneAccountsTokenReachesNoneOfAnotherAccountsJobsConflictsDuplicatesOrLists(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let owner = try await SyncSetup.make(stack, list: "Lown", board: "Bown", policy: "manual")
        let intruder = try await SyncSetup.make(stack, list: "Lint", board: "Bint")
        // The owner gets a job, a conflict and a duplicate.
        let created = try await owner.sync([owner.change("create", reminder: "R1", fields: ["title": "Mine"])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        stack.trello.userUpdateCard(id: card, ["name": "Mine (Trello)"])
        try await stack.quiet()
        let conflicted = try await owner.sync([owner.change("update", reminder: "R1", fields: ["title": "Mine (app)"], changed: ["title"])])
        let conflictID = Int(conflicted["results"]?[0]?["conflict_ids"]?[0]?.numberValue ?? 0)
        _ = stack.trello.userCreateCard(listID: "Lown", name: "Twin")
        try await stack.quiet()
        let duplicated = try await owner.sync([owner.change("create", reminder: "R2", fields: ["title": "twin"])])
        let duplicateID = Int(duplicated["results"]?[0]?["duplicate_id"]?.numberValue ?? 0)
        let jobID = try #require(created["job_id"]?.stringValue)
        #expect(conflictID > 0 && duplicateID > 0)

        let attempts: [(HTTPMethod, String, String?)] = [
            (.GET, "/dailyroundup/sync/jobs/\(jobID)", nil),
            (.POST, "/dailyroundup/conflicts/\(conflictID)/resolve", #"{"choice":"trello"}"#),
            (.POST, "/dailyroundup/duplicates/\(duplicateID)/resolve", #"{"action":"keep_both"}"#),
            (.POST, "/dailyroundup/lists/\(owner.listID)/import", nil),
            (.POST, "/dailyroundup/lists/\(owner.listID)/reconcile", nil),
        ]
        for (method, path, body) in attempts {
            let response = try await stack.callAPI(method, path, token: intruder.token, body: body)
            #expect(response.status == .notFound, "\(method) \(path): \(response.status) \(response.body)")
        }
        // A sync naming the owner's list or card is refused before anything starts.
        let foreignList = try await intruder.post([
            .object([
                "op": "create", "sync_list_id": .string(owner.listID), "reminder_id": "X", "fields": .object(["title": "x"]),
                "modified_at": .string(Timestamp.now()),
            ])
        ])
        #expect(foreignList.status == .unprocessableEntity)
        let foreignCard = try await intruder.post([intruder.change("update", reminder: "X", fields: ["title": "x"], changed: ["title"], card: card)])
        #expect(foreignCard.status == .unprocessableEntity)
        // Nothing of the owner's changed.
        #expect(stack.trello.cardValue(card)?["name"] == "Mine (Trello)")
        let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: owner.token).json["conflicts"]?.arrayValue ?? []
        #expect(conflicts.first?["status"] == "open")
        let intruderView = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: intruder.token).json["conflicts"]?.arrayValue ?? []
        #expect(intruderView.isEmpty)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func theEchoOfOurWriteIsSuppressedWhileAUserEditASecondLaterIsKept(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lecho", board: "Becho")
        let created = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "Call the plumber"])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        let page = try await s.changes()
        #expect(page.count == 1 && page.first?["changed_fields"] == .array(["trello_url"]), "the new card's page, and nothing else: \(page)")
        try await s.ack(page)
        let updated = try await s.sync([
            s.change("update", reminder: "R1", fields: ["title": "Call the plumber at 9", "completed": true], changed: ["title", "completed"])
        ])
        #expect(updated["results"]?[0]?["status"] == "ok")
        try await Task.sleep(for: .seconds(1))
        stack.trello.userUpdateCard(id: card, ["name": "Call the plumber at 10"])
        try await stack.quiet()
        let changes = try await s.changes()
        #expect(changes.count == 1, "\(changes)")
        #expect(changes.first?["change_type"] == "update" && changes.first?["reminder_id"] == "R1")
        #expect(changes.first?["changed_fields"] == .array(["title"]))
        #expect(changes.first?["fields"]?["title"] == "Call the plumber at 10")
        await stack.shutdown()
    }

    /// Trello's side changes a field, the app changes the same field before it has seen that: each policy.
    @Test(arguments: StoreBackend.available, ["manual", "lww", "prefer_trello", "prefer_reminders"])
    func conflictPolicies(backend: StoreBackend, policy: String) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "L\(policy.filter(\.isLetter))", board: "B\(policy.filter(\.isLetter))", policy: policy)
        let created = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "Pay rent", "notes": "by transfer"])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()

        stack.trello.userUpdateCard(id: card, ["name": "Pay rent (Trello)"])
        try await stack.quiet()
        // The app edits title (conflicting) and notes (only its side): notes merge in every policy.
        let result = try await s.sync([
            s.change("update", reminder: "R1", fields: ["title": "Pay rent (app)", "notes": "by card"], changed: ["title", "notes"])
        ])
        let item = try #require(result["results"]?[0])
        let trelloCard = try #require(stack.trello.cardValue(card))
        #expect(trelloCard["desc"] == "by card")
        try await stack.quiet()
        let changes = try await s.changes()
        let titleToApp = changes.last?["fields"]?["title"]
        switch policy {
        case "manual":
            #expect(item["status"] == "conflict", "\(item)")
            #expect(trelloCard["name"] == "Pay rent (Trello)")
            let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token).json["conflicts"]?.arrayValue ?? []
            #expect(conflicts.count == 1)
            #expect(conflicts.first?["trello_value"] == "Pay rent (Trello)" && conflicts.first?["reminders_value"] == "Pay rent (app)")
            #expect(conflicts.first?["field"] == "title" && conflicts.first?["reminder_id"] == "R1")
            #expect(item["conflict_ids"] == .array([conflicts.first?["id"] ?? .null]))
            // The alert push is queued for the account's devices, not the one that synced.
            let pushes = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.pushStream), "-", "+").streamEntries
            #expect(
                pushes.contains {
                    $0.fields["account"].map { String(decoding: $0, as: UTF8.self) } == s.account && $0.fields["kind"] == Array("alert".utf8)
                })
            // The user picks the reminder's value: it goes to Trello, and the conflict is resolved.
            let id = Int(conflicts.first?["id"]?.numberValue ?? 0)
            let resolved = try await stack.callAPI(.POST, "/dailyroundup/conflicts/\(id)/resolve", token: s.token, body: #"{"choice":"reminders"}"#)
            #expect(resolved.status == .ok, "\(resolved.body)")
            #expect(resolved.json["status"] == "resolved" && resolved.json["resolution"] == "reminders")
            #expect(stack.trello.cardValue(card)?["name"] == "Pay rent (app)")
            let twice = try await stack.callAPI(.POST, "/dailyroundup/conflicts/\(id)/resolve", token: s.token, body: #"{"choice":"trello"}"#)
            #expect(twice.status == .conflict)
            let missing = try await stack.callAPI(.POST, "/dailyroundup/conflicts/\(id)/resolve", token: s.token, body: #"{"choice":"value"}"#)
            #expect(missing.status == .unprocessableEntity)
        case "prefer_trello":
            #expect(item["status"] == "ok")
            #expect(trelloCard["name"] == "Pay rent (Trello)")
            #expect(titleToApp == "Pay rent (Trello)", "\(changes)")
        case "prefer_reminders", "lww":
            // lww: the app's edit (made now) is later than Trello's.
            #expect(item["status"] == "ok")
            #expect(trelloCard["name"] == "Pay rent (app)")
            // The unacknowledged Trello change the app has not applied yet now carries the winning value.
            #expect(titleToApp == nil || titleToApp == "Pay rent (app)", "\(changes)")
        default:
            Issue.record("unknown policy")
        }
        if policy == "lww" {
            // An app edit made before Trello's loses.
            stack.trello.userUpdateCard(id: card, ["name": "Pay rent (Trello, later)"])
            try await stack.quiet()
            let old = try await s.sync([
                s.change(
                    "update", reminder: "R1", fields: ["title": "Pay rent (app, earlier)"], changed: ["title"],
                    modified: Date().addingTimeInterval(-3600))
            ])
            #expect(old["results"]?[0]?["status"] == "ok")
            #expect(stack.trello.cardValue(card)?["name"] == "Pay rent (Trello, later)")
        }
        await stack.shutdown()
    }

    /// A Trello edit whose webhook has not arrived yet, kept by the policy: the job itself sends it to the apps, and
    /// wakes every device but the one that synced.
    @Test(arguments: StoreBackend.available) func aTrelloValueKeptBeforeItsWebhookReachesTheAppsAndWakesTheOtherDevices(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lkept", board: "Bkept", policy: "prefer_trello")
        let created = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "Book flights"])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        stack.trello.state.withLockedValue { $0.deliverWebhooks = false }
        stack.trello.userUpdateCard(id: card, ["name": "Book flights (Trello)"])
        stack.trello.state.withLockedValue { $0.deliverWebhooks = true }
        let result = try await s.sync([s.change("update", reminder: "R1", fields: ["title": "Book flights (app)"], changed: ["title"])])
        #expect(result["results"]?[0]?["status"] == "ok")
        #expect(stack.trello.cardValue(card)?["name"] == "Book flights (Trello)")
        let changes = try await s.changes()
        #expect(changes.count == 1 && changes.first?["fields"]?["title"] == "Book flights (Trello)", "\(changes)")
        let pushes = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.pushStream), "-", "+").streamEntries
        #expect(
            pushes.contains {
                $0.fields["kind"] == Array("background".utf8) && $0.fields["reason"] == Array("sync".utf8)
                    && $0.fields["exclude_device"] == Array("iphone-1".utf8)
            }, "\(pushes.map { $0.fields.mapValues { String(decoding: $0, as: UTF8.self) } })")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func completionWithinTwoSecondsPrefersDoneInEveryPolicy(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Ldone", board: "Bdone", policy: "prefer_reminders")
        let created = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "Water plants", "completed": false])])
        let card = try #require(created["results"]?[0]?["trello_card_id"]?.stringValue)
        try await stack.quiet()
        // Completed in Trello; un-completed on the phone within the same second: done wins despite prefer_reminders.
        stack.trello.userUpdateCard(id: card, ["dueComplete": true])
        try await stack.quiet()
        let result = try await s.sync([s.change("update", reminder: "R1", fields: ["completed": false], changed: ["completed"], modified: Date())])
        #expect(result["results"]?[0]?["status"] == "ok")
        #expect(stack.trello.cardValue(card)?["dueComplete"] == .bool(true))
        let changes = try await s.changes()
        #expect(changes.last?["fields"]?["completed"] == .bool(true), "\(changes)")
        // Outside the two seconds the policy decides again: the phone's later un-complete wins. (Later for real: a
        // `modified_at` ahead of the server's clock is taken as the moment the server received it.)
        try await Task.sleep(for: .milliseconds(2_500))
        let later = try await s.sync([
            s.change("update", reminder: "R1", fields: ["completed": false], changed: ["completed"], modified: Date())
        ])
        #expect(later["results"]?[0]?["status"] == "ok")
        #expect(stack.trello.cardValue(card)?["dueComplete"] == .bool(false))
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func duplicatesAreFlaggedAndResolvedAndImportEmitsCreates(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Ldup", board: "Bdup")
        // Cards made in Trello before the list was paired: the webhook never told us about them.
        let existing = stack.trello.userCreateCard(listID: "Ldup", name: "Buy  Stamps", due: "2026-12-01T10:00:00.000Z")
        let other = stack.trello.userCreateCard(listID: "Ldup", name: "Return library books")
        try await stack.quiet()
        let result = try await s.sync([
            s.change("create", reminder: "R1", fields: ["title": "buy stamps", "due_date": "2026-12-01T10:00:00Z"]),
            s.change("create", reminder: "R2", fields: ["title": "Return library books"]),
        ])
        let items = try #require(result["results"]?.arrayValue)
        #expect(items.map { $0["status"] } == ["duplicate", "duplicate"], "\(result)")
        #expect(items[0]["trello_card_id"] == .string(existing) && items[1]["trello_card_id"] == .string(other))
        #expect(stack.trello.cardsCreated == 0)
        let listed = try await stack.callAPI(.GET, "/dailyroundup/duplicates", token: s.token).json["duplicates"]?.arrayValue ?? []
        #expect(listed.count == 2)
        let merge = try await stack.callAPI(
            .POST, "/dailyroundup/duplicates/\(Int(items[0]["duplicate_id"]?.numberValue ?? 0))/resolve", token: s.token, body: #"{"action":"merge"}"#
        )
        #expect(merge.status == .ok && merge.json["status"] == "merged", "\(merge.body)")
        let keep = try await stack.callAPI(
            .POST, "/dailyroundup/duplicates/\(Int(items[1]["duplicate_id"]?.numberValue ?? 0))/resolve", token: s.token,
            body: #"{"action":"keep_both"}"#)
        #expect(keep.status == .ok && keep.json["status"] == "kept_both", "\(keep.body)")
        #expect(stack.trello.cardsCreated == 1)
        #expect(stack.trello.openCards(inList: "Ldup").filter { $0["name"] == "Return library books" }.count == 2)
        // Merged: the card's values reach the app as an update carrying the reminder id.
        let changes = try await s.changes()
        #expect(changes.contains { $0["reminder_id"] == "R1" && $0["trello_card_id"] == .string(existing) }, "\(changes)")

        // Import: a create for every open card no reminder maps to — the new card and the Trello-made "Return library
        // books" (kept apart from R2's) — and none for the cards reminders map to.
        let third = stack.trello.userCreateCard(listID: "Ldup", name: "Renew passport")
        try await stack.quiet()
        try await s.ack(try await s.changes())
        let started = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/import", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        let job = try await s.wait(job: try #require(started.json["job_id"]?.stringValue))
        #expect(job["status"] == "completed" && job["kind"] == "import", "\(job)")
        let creates = try await s.changes().filter { $0["change_type"] == "create" }
        #expect(Set(creates.compactMap { $0["trello_card_id"]?.stringValue }) == [third, other], "\(creates)")
        #expect(try await stack.callAPI(.POST, "/dailyroundup/lists/no-such-list/import", token: s.token).status == .notFound)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aDoubleTapOnResolveAppliesOnce(backend: StoreBackend) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Ltap", board: "Btap")
        _ = stack.trello.userCreateCard(listID: "Ltap", name: "Water the garden")
        try await stack.quiet()
        let result = try await s.sync([s.change("create", reminder: "R1", fields: ["title": "water the garden"])])
        let id = Int(try #require(result["results"]?[0]?["duplicate_id"]?.numberValue))
        // Trello is slow, and the app sends "keep both" twice at once.
        stack.trello.setRequestDelay(.milliseconds(400))
        async let first = stack.callAPI(.POST, "/dailyroundup/duplicates/\(id)/resolve", token: s.token, body: #"{"action":"keep_both"}"#)
        async let second = stack.callAPI(.POST, "/dailyroundup/duplicates/\(id)/resolve", token: s.token, body: #"{"action":"keep_both"}"#)
        let answers = try await [first, second]
        stack.trello.setRequestDelay(.zero)
        #expect(answers.map(\.status.code).sorted() == [200, 409], "\(answers.map(\.body))")
        #expect(stack.trello.cardsCreated == 1)
        #expect(stack.trello.openCards(inList: "Ltap").count == 2)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aWorkerKilledMidJobLeavesAStaleJobAndResubmittingMakesNoSecondCard(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStack(backend, extra: Self.fast)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lkill", board: "Bkill")
        stack.trello.setRequestDelay(.milliseconds(400))
        let changes = (1...8).map { s.change("create", reminder: "R\($0)", fields: ["title": .string("Task \($0)")]) }
        let posted = try await s.post(changes)
        #expect(posted.status == .accepted)
        let id = try #require(posted.json["job_id"]?.stringValue)
        let progressed = try await TestSupport.eventually(timeout: .seconds(30)) {
            let job = try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: s.token).json
            return (job["processed"]?.numberValue ?? 0) >= 2
        }
        #expect(progressed)
        stack.workers[0].signal(SIGKILL)
        let killedAt = ContinuousClock.now
        let stale = try await s.wait(job: id, timeout: .seconds(30))
        #expect(stale["status"] == "error" && stale["error"] == "stale", "\(stale)")
        #expect(ContinuousClock.now - killedAt < .seconds(6 + 3))
        let done = Int(stale["processed"]?.numberValue ?? 0)
        #expect(done >= 2 && done < 8)
        // Items already done keep their results.
        #expect(stale["results"]?.arrayValue?.count == done)

        stack.trello.setRequestDelay(.zero)
        try await stack.startWorker(name: "w2", extra: Self.fast)
        let again = try await s.sync(changes)
        #expect(again["status"] == "completed")
        #expect(again["results"]?.arrayValue?.allSatisfy { $0["status"] == "ok" } == true, "\(again)")
        let cards = stack.trello.openCards(inList: "Lkill")
        #expect(cards.count == 8, "\(cards.map { $0["name"] })")
        #expect(Set(cards.compactMap { $0["name"]?.stringValue }).count == 8)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func a429StormWithTwoWorkersCompletesWithinTrellosLimit(backend: StoreBackend) async throws {
        let limit = 30
        let extra = ["ROUNDUP_TRELLO_TOKEN_LIMIT": String(limit)]
        let stack = try await startStack(backend, workers: 2, extra: extra)
        defer { Task { await stack.shutdown() } }
        stack.trello.setTokenLimit(limit)
        // Two accounts of one Trello user: one token, jobs on both workers at once.
        let a = try await SyncSetup.make(stack, list: "La", board: "Ba")
        let b = try await SyncSetup.make(stack, list: "Lb", board: "Bb")
        stack.trello.failNextRequests(status: 429, count: 6, pathPrefix: "/1/")
        async let jobA = a.sync(
            (1...12).map { a.change("create", reminder: "A\($0)", fields: ["title": .string("A \($0)")]) }, timeout: .seconds(120))
        async let jobB = b.sync(
            (1...12).map { b.change("create", reminder: "B\($0)", fields: ["title": .string("B \($0)")]) }, timeout: .seconds(120))
        let (resultA, resultB) = try await (jobA, jobB)
        #expect(resultA["status"] == "completed" && resultB["status"] == "completed")
        #expect(resultA["results"]?.arrayValue?.allSatisfy { $0["status"] == "ok" } == true, "\(resultA)")
        #expect(resultB["results"]?.arrayValue?.allSatisfy { $0["status"] == "ok" } == true, "\(resultB)")
        try await stack.quiet()
        let peak = stack.trello.maxRequestsInAnyWindow(token: "test-token")
        #expect(peak <= limit, "a 10-second window saw \(peak) requests")
        #expect(peak >= limit / 2, "the test did not come near the limit (\(peak))")
        #expect(stack.trello.openCards(inList: "La").count == 12 && stack.trello.openCards(inList: "Lb").count == 12)
        await stack.shutdown()
    }

    /// Four accounts' long jobs kept a fifth account's one-reminder sync from starting, and after 60 s it read
    /// `error: stale` before it ever ran. Here one job slot, stale after 3 s: A's slow job holds the slot while B's
    /// waits twice the stale time — `queued`, not stale — and then runs and completes.
    @Test(arguments: StoreBackend.available) func aJobQueuedLongerThanTheStaleTimeStillRunsAndCompletes(backend: StoreBackend) async throws {
        let extra = ["ROUNDUP_JOB_STALE_SECONDS": "3", "ROUNDUP_JOB_HEARTBEAT_SECONDS": "1", "ROUNDUP_JOB_CONCURRENCY": "1"]
        let stack = try await startStack(backend, extra: extra)
        defer { Task { await stack.shutdown() } }
        let a = try await SyncSetup.make(stack, list: "Lqa", board: "Bqa")
        let b = try await SyncSetup.make(stack, list: "Lqb", board: "Bqb")
        stack.trello.setRequestDelay(.milliseconds(500))
        let long = try await a.post((1...20).map { a.change("create", reminder: "A\($0)", fields: ["title": .string("A \($0)")]) })
        #expect(long.status == .accepted, "\(long.body)")
        let longID = try #require(long.json["job_id"]?.stringValue)
        func status(_ setup: SyncSetup, _ id: String) async throws -> String? {
            try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: setup.token).json["status"]?.stringValue
        }
        #expect(try await TestSupport.eventually(timeout: .seconds(30)) { try await status(a, longID) == "running" })

        let short = try await b.post([b.change("create", reminder: "B1", fields: ["title": "B 1"])])
        let posted = ContinuousClock.now
        #expect(short.status == .accepted && short.json["status"] == "running", "\(short.body)")
        let shortID = try #require(short.json["job_id"]?.stringValue)
        #expect(try await status(b, shortID) == "queued")
        // Twice the stale time later, A still holds the only slot and B still waits, not given up.
        try await Task.sleep(until: posted + .seconds(6))
        let waiting = try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(shortID)", token: b.token).json
        let longStatus = try await status(a, longID)
        #expect(longStatus == "running", "A's job ended too soon for the test to mean anything: \(longStatus ?? "nil")")
        #expect(waiting["status"] == "queued" && waiting["error"] == .null, "\(waiting)")
        // B's account is still busy with it.
        let again = try await b.post([b.change("create", reminder: "B2", fields: ["title": "B 2"])])
        #expect(again.status == .conflict && again.json["error"]?["job_id"]?.stringValue == shortID, "\(again.body)")

        stack.trello.setRequestDelay(.zero)
        let done = try await b.wait(job: shortID, timeout: .seconds(60))
        #expect(done["status"] == "completed" && done["results"]?[0]?["status"] == "ok", "\(done)")
        #expect(try await a.wait(job: longID, timeout: .seconds(60))["status"] == "completed")
        #expect(stack.trello.openCards(inList: "Lqb").count == 1 && stack.trello.openCards(inList: "Lqa").count == 20)
        await stack.shutdown()
    }

    /// A sync is bounded in the Trello writes it implies (`ROUNDUP_SYNC_MAX_TRELLO_WRITES`, here 40): over it, 413
    /// `payload_too_large` naming the limit, and no job; at it, a job as usual.
    @Test(arguments: StoreBackend.available) func aSyncOverTheTrelloWriteBoundIsRefusedNamingTheLimitAndStartsNoJob(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStack(backend, extra: ["ROUNDUP_SYNC_MAX_TRELLO_WRITES": "40"])
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lbound", board: "Bbound")
        func links(_ count: Int, _ tag: String) -> JSONValue {
            .array((0..<count).map { .object(["url": .string("https://example.com/\(tag)/\($0)")]) })
        }
        // One create with 45 links: 46 writes, alone past the bound.
        let one = try await s.post([s.change("create", reminder: "R1", fields: ["title": "Links", "attachments": links(45, "a")])])
        #expect(one.status == .payloadTooLarge, "\(one.body)")
        #expect(one.json["error"]?["code"] == "payload_too_large", "\(one.body)")
        #expect(one.json["error"]?["limit"] == .number(40) && one.json["error"]?["trello_writes"] == .number(46), "\(one.body)")
        let message = one.json["error"]?["message"]?.stringValue ?? ""
        #expect(message.contains("at most 40") && message.contains("changes[0] alone"), "\(message)")
        // Three creates of 15 links: 16 writes each, the third past the bound.
        let three = try await s.post(
            (1...3).map { s.change("create", reminder: "R\($0)", fields: ["title": "Links", "attachments": links(15, "\($0)")]) })
        #expect(three.status == .payloadTooLarge && three.json["error"]?["trello_writes"] == .number(48), "\(three.body)")
        #expect(three.json["error"]?["message"]?.stringValue?.contains("changes[2] is the first past it") == true, "\(three.body)")
        // Neither started a job or wrote to Trello.
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.jobStream)).int ?? 0 == 0)
        #expect(stack.trello.cardsCreated == 0)

        // 39 links: 40 writes, at the bound: a job that completes.
        let at = try await s.sync([s.change("create", reminder: "R9", fields: ["title": "Links", "attachments": links(39, "ok")])])
        #expect(at["status"] == "completed" && at["results"]?[0]?["status"] == "ok", "\(at)")
        let card = try #require(stack.trello.openCards(inList: "Lbound").first)
        #expect(card["attachments"]?.arrayValue?.count == 39)
        await stack.shutdown()
    }
}

/// One place submits and queues jobs (the API, `roundupctl reconcile`): a job Redis refuses to queue is ended at once,
/// so its account is not blocked behind a job no worker will run, and the next submission goes through.
@Suite struct JobQueueTests {
    @Test(arguments: StoreBackend.available) func aJobRedisDoesNotTakeIsEndedAndDoesNotBlockTheAccount(backend: StoreBackend) async throws {
        let directory = try TestSupport.temporaryDirectory("jobqueue")
        let store = try await TestStore.open(url: try await TestStore.makeURL(backend, in: directory))
        let server = try await RedisServer()
        let redis = RedisClient(configuration: try RedisConfiguration(url: server.url))
        let keys = RedisKeys(prefix: "jq:")
        let queue = JobQueue(store: store, redis: redis, keys: keys, staleAfter: 60)
        let account = try await store.createAccount(authTokenHash: UUID().uuidString)

        // The job stream's key holds a string: Redis refuses the XADD (WRONGTYPE).
        _ = try await redis.send("SET", RedisArgument(keys.jobStream), "not a stream")
        var refused: String?
        do {
            _ = try await queue.submit(accountID: account, kind: .sync, payload: .array([]), total: 0)
        } catch let error as JobQueue.NotQueued {
            refused = error.jobID
        }
        let id = try #require(refused, "the submission was not refused")
        let ended = try #require(try await store.job(accountID: account, id: id))
        #expect(ended.status == .error && ended.error == "could not be queued", "\(ended)")

        // Redis takes entries again: the account's next job is created (no lease left behind) and queued.
        _ = try await redis.send("DEL", RedisArgument(keys.jobStream))
        guard case .created(let job) = try await queue.submit(accountID: account, kind: .sync, payload: .array([]), total: 0) else {
            Issue.record("the next job was not created")
            return
        }
        let entries = try await redis.send("XRANGE", RedisArgument(keys.jobStream), "-", "+")
        #expect(entries.array?.count == 1 && entries.description.contains(job.id), "\(entries)")
        await redis.shutdown()
    }
}
