import Foundation
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupTesting
import Testing

@testable import RoundupAPI
@testable import RoundupStore

/// Nothing accepted is dropped without a word: a number no double holds is refused where the request is read, naming
/// the field; a stored job whose items cannot be read fails loudly instead of reading as "no items"; `completed` means
/// every item has a result.
@Suite(.serialized) struct NothingDroppedTests {
    /// The ingress, a worker and the API, with one account and its list.
    func startStack(_ backend: StoreBackend, list: String, board: String) async throws -> SyncSetup {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        return try await SyncSetup.make(stack, list: list, board: board)
    }

    @Test func bodyWalkNamesTheNonFiniteNumber() {
        let body: JSONValue = .object([
            "device_id": "phone",
            "changes": .array([
                .object(["fields": .object(["title": "a"])]),
                .object(["fields": .object(["title": "b", "due_reminder_minutes": .number(.infinity)])]),
            ]),
        ])
        #expect(JSONBody.firstUnfit(body) == .nonFinite(path: "changes[1].fields.due_reminder_minutes"))
        #expect(JSONBody.firstUnfit(.array([.number(-.infinity)])) == .nonFinite(path: "[0]"))
        #expect(JSONBody.firstUnfit(.number(.nan)) == .nonFinite(path: "the body"))
        #expect(JSONBody.firstUnfit(.object(["a": .string("x\u{0}y")])) == .nul)
        #expect(JSONBody.firstUnfit(.object(["a": .number(1e308), "b": .array([.number(-2.5e-300)])])) == nil)
    }

    @Test func nonFiniteNumbersAreWrittenAsNullNeverAsText() throws {
        let value: JSONValue = .object(["minutes": .number(.infinity), "nan": .number(.nan), "ok": .number(15)])
        let text = value.canonicalJSON
        #expect(text == #"{"minutes":null,"nan":null,"ok":15}"#)
        #expect(try JSONParser.parse(Array(text.utf8)) == .object(["minutes": .null, "nan": .null, "ok": .number(15)]))
    }

    @Test func unreadableStoredItemsThrowInsteadOfReadingAsNone() throws {
        let item: JSONValue = .object([
            "op": "create", "sync_list_id": "L", "reminder_id": "R1", "fields": .object(["title": "Milk"]), "modified_at": "2026-11-23T09:00:00Z",
        ])
        var job = SyncJob(
            id: "j1", accountID: "a", kind: .sync, status: .running, deviceID: nil, processed: 0, total: 1, payload: .array([item]), results: [],
            error: nil, createdAt: "2026-11-23T09:00:00Z", updatedAt: "2026-11-23T09:00:00Z")
        #expect(try job.syncItems().map(\.reminderID) == ["R1"])
        job.payload = .null  // what an unparseable stored text reads as
        #expect(throws: UnreadablePayload.self) { try job.syncItems() }
        job.payload = .array([item, .string("garbage")])
        job.total = 2
        #expect(throws: UnreadablePayload.self) { try job.syncItems() }
        job.payload = .array([item])
        job.total = 3  // items lost between the request and the store
        #expect(throws: UnreadablePayload.self) { try job.syncItems() }
    }

    @Test(arguments: StoreBackend.available) func aSyncWithAnOutOfRangeNumberIsRefusedWholeAndNothingIsLost(backend: StoreBackend) async throws {
        let s = try await startStack(backend, list: "Lnum", board: "Bnum")
        let stack = s.stack
        defer { Task { await stack.shutdown() } }

        // The finding: three creates, the third with 1e400 (valid JSON, no double holds it), was answered 202 and
        // ended `completed` with 0 of 3 processed. Raw text, since no JSONValue can hold 1e400.
        func item(_ reminder: String, _ title: String, minutes: String) -> String {
            #"{"op":"create","sync_list_id":"\#(s.listID)","reminder_id":"\#(reminder)","modified_at":"2026-11-23T09:00:00Z","fields":{"title":"\#(title)","due_date":"2026-12-01T09:00:00Z","due_reminder_minutes":\#(minutes)}}"#
        }
        for huge in ["1e400", "-1e400", "1" + String(repeating: "0", count: 400)] {
            let body =
                #"{"device_id":"iphone-1","changes":["# + item("R1", "Milk", minutes: "15") + "," + item("R2", "Bread", minutes: "30") + ","
                + item("R3", "Eggs", minutes: huge) + "]}"
            let refused = try await stack.callAPI(.POST, "/dailyroundup/sync", token: s.token, body: body)
            #expect(refused.status == .unprocessableEntity, "\(refused.body)")
            let message = refused.json["error"]?["message"]?.stringValue ?? ""
            #expect(message.contains("changes[2].fields.due_reminder_minutes"), "\(refused.body)")
        }
        let jobs = try await stack.store().jobs(limit: 100, id: nil)
        #expect(jobs.isEmpty, "a refused request made a job")

        // The app sends the two good reminders again (with a real number for the third): every one gets its card.
        let body =
            #"{"device_id":"iphone-1","changes":["# + item("R1", "Milk", minutes: "15") + "," + item("R2", "Bread", minutes: "30") + ","
            + item("R3", "Eggs", minutes: "1e3") + "]}"
        let accepted = try await stack.callAPI(.POST, "/dailyroundup/sync", token: s.token, body: body)
        #expect(accepted.status == .accepted, "\(accepted.body)")
        let job = try await s.wait(job: try #require(accepted.json["job_id"]?.stringValue))
        #expect(job["status"] == "completed" && job["processed"] == .number(3), "\(job)")
        let cards = try #require(job["results"]?.arrayValue).compactMap { $0["trello_card_id"]?.stringValue }
        #expect(cards.count == 3)
        #expect(Set(cards.compactMap { stack.trello.cardValue($0)?["name"]?.stringValue }) == ["Milk", "Bread", "Eggs"])
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aJobWhoseStoredItemsCannotBeReadFailsLoudly(backend: StoreBackend) async throws {
        let s = try await startStack(backend, list: "Lbad", board: "Bbad")
        let stack = s.stack
        defer { Task { await stack.shutdown() } }

        // A payload as a store might hold it after damage: one readable item, one not, and a count that says two.
        let good = s.change("create", reminder: "R1", fields: ["title": "Milk"])
        let queue = JobQueue(store: try await stack.store(), redis: stack.redis, keys: stack.keys, staleAfter: 60)
        let submission = try await queue.submit(accountID: s.account, kind: .sync, payload: .array([good, .string("garbage")]), total: 2)
        guard case .created(let created) = submission else {
            Issue.record("not created: \(submission)")
            return
        }
        let job = try await s.wait(job: created.id)
        #expect(job["status"] == "error", "\(job)")
        #expect(job["error"]?.stringValue?.contains("cannot be read") == true, "\(job)")
        // Loudly: the worker logged it and counted it; no card was made from half a payload.
        let logged = await TestSupport.eventually(timeout: .seconds(10)) { stack.allLogs.contains("job payload unreadable") }
        #expect(logged)
        #expect(stack.trello.openCards(inList: "Lbad").isEmpty && stack.trello.cardsCreated == 0)
        await stack.shutdown()
    }
}
