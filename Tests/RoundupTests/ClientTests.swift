import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOConcurrencyHelpers
import NIOCore
import OpenAPIAsyncHTTPClient
import RoundupClient
import RoundupCore
import RoundupTesting
import Testing

/// RoundupClient, the apps' library, against the real roundup-api, ingress and worker with the fake Trello; and
/// against a small server of canned answers for what the real one cannot be made to say (values from a newer server,
/// failures to retry). These call the client directly, not through RoundupSync's engine: they check the client's own
/// calls and types (what the engine is built on, and what an app without the engine uses); the engine's flows are
/// SyncEngineTests'.
@Suite(.serialized) struct ClientTests {
    /// AsyncHTTPClient's transport: URLSession on Linux buffers whole responses, so the stream needs this one here
    /// (the apps use URLSession, which streams on Apple's systems).
    static let transport = AsyncHTTPClientTransport()

    func start(_ backend: StoreBackend, policy: String? = nil) async throws -> (Stack, RoundupClient.Setup) {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        stack.trello.addList(id: "Lclient", boardID: "Bclient")
        let setup = try await RoundupClient.setUp(
            serverURL: URL(string: "http://127.0.0.1:\(stack.apiPort)")!, bootstrapToken: SyncSetup.bootstrap,
            trello: .init(apiKey: "test-api-key", webhookSecret: stack.trello.webhookSecret, token: "test-token"),
            list: .init(name: "Errands", trelloBoardID: "Bclient", trelloListID: "Lclient"), transport: Self.transport)
        if let policy {
            var update = Components.Schemas.AccountUpdate()
            update.conflictPolicy = OpenEnum(rawValue: policy)
            _ = try await setup.client.updateAccount(update)
        }
        return (stack, setup)
    }

    @Test(arguments: StoreBackend.available) func theSetUpFlowThenAWebhookBecomesAChangeThatIsAcked(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let client = setup.client
        // The five steps left an account with its credentials masked and one paired list.
        let account = try await client.account()
        #expect(account.accountId == setup.accountID)
        #expect(account.trelloToken?.hasSuffix("oken") == true && account.trelloToken?.contains("test-token") == false)
        #expect(try await client.lists().map(\.syncListId) == [setup.list.syncListId])
        #expect(try await client.changes().collect().isEmpty)

        // Someone adds cards in Trello: signed webhooks, the worker, and changes the app pages through.
        let cards = (1...3).map { stack.trello.userCreateCard(listID: "Lclient", name: "Card \($0)") }
        #expect(try await TestSupport.eventually { try await client.changes(pageSize: 2).collect().count == 3 })
        let changes = try await client.changes(pageSize: 2).collect()
        #expect(changes.map(\.trelloCardId) == cards)
        #expect(changes.allSatisfy { $0.changeType == .create && $0.reminderId == nil })
        #expect(changes[0].value(of: .title) as? String == "Card 1")
        // Acked with the reminders made for them: gone from the feed, and the next change of a card carries its reminder.
        let acked = try await client.ack(changes.enumerated().map { ChangeAck(id: $1.id, reminderID: "R\($0)") })
        #expect(Set(acked) == Set(changes.map(\.id)))
        #expect(try await client.changes().collect().isEmpty)
        stack.trello.userUpdateCard(id: cards[0], ["name": "Card 1, renamed"])
        #expect(try await TestSupport.eventually { try await client.changes().collect().count == 1 })
        let update = try #require(try await client.changes().collect().first)
        #expect(update.changeType == .update && update.reminderId == "R0" && update.value(of: .title) as? String == "Card 1, renamed")
        #expect(try await client.ack(update.id) == [update.id])

        // A failure is one typed error: the server's code and message, and the request id.
        do {
            _ = try await client.ack(999_999)
            Issue.record("acking an unknown change succeeded")
        } catch let error as RoundupError {
            #expect(error.status == 404 && error.code == .notFound && error.requestID?.isEmpty == false, "\(error)")
        }
        await stack.shutdown()
    }

    /// A new device with the client: the board's vocabulary typed, the list's cards paged through, dates typed.
    @Test(arguments: StoreBackend.available) func aNewDeviceReadsTheVocabularyAndTheCardsTyped(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let client = setup.client
        stack.trello.setBoardLabels(boardID: "Bclient", [("lab-1", "Errand", "blue")])
        stack.trello.setPriorityField(boardID: "Bclient", fieldID: "F1", options: [("o-high", "High"), ("o-low", "Low")])
        let list = try await client.list(setup.list.syncListId)
        #expect(list.labels?.map(\.name) == ["Errand"] && list.priorityOptions?.map(\.text) == ["High", "Low"], "\(list)")
        #expect(list.priorityOptions?.map(\.level) == [1, 9])

        var made: [String] = []
        for n in 0..<5 {
            made.append(stack.trello.userCreateCard(listID: "Lclient", name: "Card \(n)", due: n == 0 ? "2026-12-03T09:30:00.000Z" : nil))
        }
        #expect(try await TestSupport.eventually { try await client.changes().collect().count == 5 })
        let changes = try await client.changes().collect()
        _ = try await client.ack(changes.map { ChangeAck(id: $0.id, reminderID: "R-\($0.trelloCardId)") })

        let cards = try await client.listCards(setup.list.syncListId, pageSize: 2)
        #expect(cards.map(\.trelloCardId).sorted() == made.sorted())
        let first = try #require(cards.first { $0.trelloCardId == made[0] })
        #expect(first.reminderId == "R-\(made[0])" && first.fields?.title == "Card 0")
        #expect(first.fields?.due == .instant(Date(timeIntervalSince1970: 1_796_290_200)), "\(String(describing: first.fields?.dueDate))")

        // A day and an instant, both ways.
        #expect(ReminderDateValue("2026-12-01") == .day(year: 2026, month: 12, day: 1))
        #expect(ReminderDateValue("2026-12-01")?.description == "2026-12-01")
        #expect(ReminderDateValue("2026-12-01T10:00:00+01:00") == .instant(Date(timeIntervalSince1970: 1_796_115_600)))
        #expect(ReminderDateValue("2026-13-01") == nil && ReminderDateValue("soon") == nil)
        #expect(ReminderDateValue(DateComponents(year: 2026, month: 12, day: 1)) == .day(year: 2026, month: 12, day: 1))
        #expect(ReminderDateValue.day(year: 2026, month: 12, day: 1).dateComponents().hour == nil)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func liveChangesFollowNewOnesAndResumeAfterTheServerEndsTheStream(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let first = stack.trello.userCreateCard(listID: "Lclient", name: "Before the stream")
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 1 })
        let received = ReceivedChanges()
        let reader = Task {
            for try await change in setup.client.liveChanges(reconnect: RetryPolicy(attempts: 100, base: .milliseconds(100), ceiling: .seconds(1))) {
                received.append(change)
            }
        }
        defer { reader.cancel() }
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { received.cards == [first] })
        let second = stack.trello.userCreateCard(listID: "Lclient", name: "While it streams")
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { received.cards == [first, second] })

        // The API process stops (its streams end) and another takes its port: the sequence reconnects by itself and
        // resumes after the last change it delivered, so nothing is missed or repeated.
        let port = stack.apiPort
        let api = try #require(stack.api)
        api.signal(SIGTERM)
        #expect(await api.wait(timeout: .seconds(15)) == 0)
        let third = stack.trello.userCreateCard(listID: "Lclient", name: "While no API runs")
        try await stack.quiet()
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, port: port)
        let fourth = stack.trello.userCreateCard(listID: "Lclient", name: "After the restart")
        #expect(await TestSupport.eventually(timeout: .seconds(20)) { received.cards.count == 4 })
        try await Task.sleep(for: .milliseconds(300))
        #expect(received.cards == [first, second, third, fourth])
        #expect(received.ids == received.ids.sorted())
        reader.cancel()
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aSyncJobWithAConflictIsWaitedForAndResolved(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend, policy: "manual")
        defer { Task { await stack.shutdown() } }
        let client = setup.client
        let list = setup.list.syncListId
        // The app keeps the batch's key with it: posted again after a crash (before or after the answer), the same job.
        let key = RoundupClient.makeIdempotencyKey()
        let batch: [SyncChange] = [
            .init(op: .create, syncListId: list, reminderId: "R1", fields: .init(title: "Pay rent", notes: "by transfer"), modifiedAt: Date())
        ]
        let first = try await client.submitSync(deviceID: "iphone", changes: batch, idempotencyKey: key)
        let created = try await client.sync(deviceID: "iphone", changes: batch, idempotencyKey: key)
        #expect(created.jobId == first.jobId, "a second post of the batch started a second job")
        #expect(created.status == .completed, "\(created)")
        #expect(stack.trello.openCards(inList: "Lclient").count == 1, "the batch made a second card")
        let card = try #require(created.results.first?.trelloCardId)
        try await stack.quiet()

        stack.trello.userUpdateCard(id: card, ["name": "Pay rent (Trello)"])
        try await stack.quiet()
        let job = try await client.sync(
            deviceID: "iphone",
            changes: [
                .init(
                    op: .update, syncListId: list, reminderId: "R1", fields: .init(title: "Pay rent (app)"), changedFields: [.title],
                    modifiedAt: Date())
            ], idempotencyKey: RoundupClient.makeIdempotencyKey())
        #expect(job.status == .completed)
        let item = try #require(job.results.first)
        #expect(item.status == .conflict, "\(item)")
        let conflicts = try await client.conflicts()
        #expect(conflicts.count == 1 && item.conflictIds == conflicts.map(\.id))
        let conflict = try #require(conflicts.first)
        #expect(conflict.field == .title && conflict.status == .open && conflict.reminderId == "R1")
        let resolved = try await client.resolveConflict(conflict.id, choice: .reminders)
        #expect(resolved.status == .resolved)
        #expect(stack.trello.cardValue(card)?["name"] == "Pay rent (app)")
        do {
            _ = try await client.resolveConflict(conflict.id, choice: .trello)
            Issue.record("a resolved conflict was resolved again")
        } catch let error as RoundupError {
            #expect(error.status == 409, "\(error)")
        }
        await stack.shutdown()
    }

    /// A card holding everything, as RoundupClient hands it to an app: every field typed; and typed edits back.
    @Test(arguments: StoreBackend.available) func everyFieldOfARealChangeDecodesTypedAndGoesBack(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let client = setup.client
        stack.trello.setBoardLabels(boardID: "Bclient", [("lab-1", "Home", "green"), ("lab-2", "Work", "blue")])
        stack.trello.setPriorityField(boardID: "Bclient", fieldID: "F1", options: [("o-high", "High"), ("o-low", "Low")])
        let card = stack.trello.userCreateCard(listID: "Lclient", name: "Renew passport", desc: "Photos first", due: "2026-12-10T08:30:00.000Z")
        stack.trello.userUpdateCard(id: card, ["start": "2026-12-01T08:00:00.000Z", "dueReminder": .number(60)])
        stack.trello.userUpdateCard(id: card, ["locationName": "Town hall", "address": "5 Square", "coordinates": "45.5,-73.5"])
        stack.trello.userSetLabel(cardID: card, labelID: "lab-1", on: true)
        let (checklistID, itemIDs) = stack.trello.userAddChecklist(cardID: card, name: "Bring", items: ["Old passport", "Photos"])
        let link = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/form", name: "Form")
        stack.trello.userSetPriority(cardID: card, fieldID: "F1", optionID: "o-low")
        try await stack.quiet()
        let changes = try await client.changes().collect()
        #expect(changes.count == 1 && changes.first?.changeType.known == .create, "\(changes)")
        let fields = try #require(changes.first?.fields)
        #expect(fields.title == "Renew passport" && fields.notes == "Photos first" && fields.completed == false)
        #expect(fields.dueDate == "2026-12-10T08:30:00.000Z")
        #expect(fields.startDate == "2026-12-01T08:00:00.000Z")
        #expect(fields.priority == "low" && fields.priorityLevel == 9)
        #expect(fields.labels == [Label(id: "lab-1", name: "Home", color: "green")])
        #expect(
            fields.checklists
                == [
                    Checklist(
                        id: checklistID, name: "Bring",
                        items: [
                            CheckItem(id: itemIDs[0], name: "Old passport", completed: false),
                            CheckItem(id: itemIDs[1], name: "Photos", completed: false),
                        ])
                ])
        #expect(fields.url == "https://example.com/form")
        #expect(fields.attachments == [Attachment(id: link, name: "Form", url: "https://example.com/form", isUpload: false, mimeType: nil)])
        #expect(fields.location == Location(name: "Town hall", address: "5 Square", latitude: 45.5, longitude: -73.5))
        #expect(fields.trelloUrl == "https://trello.com/c/" + String(card.suffix(8)))
        #expect(fields.dueReminderMinutes == 60)
        #expect(changes.first?.value(of: .labels) as? [Label] == fields.labels && changes.first?.value(of: .priorityLevel) as? Int == 9)
        _ = try await client.ack(changes.map { ChangeAck(id: $0.id, reminderID: "R1") })

        // Typed edits back: a label by name, an item ticked, a level, the due reminder cleared by leaving it out.
        let job = try await client.sync(
            deviceID: "iphone",
            changes: [
                .init(
                    op: .update, syncListId: setup.list.syncListId, reminderId: "R1",
                    fields: .init(
                        priorityLevel: 1, labels: [LabelInput(name: "Work")],
                        checklists: [ChecklistInput(id: checklistID, items: [CheckItemInput(id: itemIDs[1], completed: true)])]),
                    changedFields: [.priorityLevel, .labels, .checklists, .dueReminderMinutes], modifiedAt: Date())
            ], idempotencyKey: RoundupClient.makeIdempotencyKey())
        #expect(job.status == .completed && job.results.first?.status.known == .ok, "\(job)")
        let after = try #require(stack.trello.cardValue(card))
        #expect(after["idLabels"] == .array(["lab-2"]) && after["customFieldItems"]?[0]?["idValue"] == "o-high")
        #expect(after["checklists"]?[0]?["checkItems"]?[1]?["state"] == "complete" && after["dueReminder"] == .number(-1))
        try await stack.quiet()
        let told = try await client.changes().collect()
        #expect(told.count == 1 && told.first?.fields.labels?.first?.name == "Work" && told.first?.fields.priority == "high", "\(told)")
        await stack.shutdown()
    }

    /// What the real server cannot be made to say: values a newer server might send, and failures to retry.
    @Test func valuesFromANewerServerDecodeAndTransientFailuresAreRetried() async throws {
        let attempts = ReceivedChanges()
        let router = Router()
        router.get("/dailyroundup/changes") { _, _ -> Response in
            let body = #"""
                {"changes":[{"id":7,"change_type":"archive","sync_list_id":"L","trello_card_id":"C","reminder_id":null,
                "changed_fields":["title","mood"],"fields":{"title":"Hello","mood":"sunny"},"created_at":"2026-11-23T10:00:00.000Z"}],
                "has_more":false,"server_time":"2026-11-23T10:00:01.000Z","shiny_new_member":true}
                """#
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        router.get("/dailyroundup/sync/jobs/{id}") { _, _ -> Response in
            attempts.bump()
            // First a busy server (503 with Retry-After), then a job in a state this client does not know.
            if attempts.count == 1 {
                return Response(
                    status: .serviceUnavailable, headers: [.contentType: "application/json", .retryAfter: "1"],
                    body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"code":"unavailable","message":"try later","request_id":"r-1"}}"#)))
            }
            let body = #"""
                {"job_id":"J","kind":"sync","status":"paused","processed":0,"total":1,"results":[],"error":null,
                "created_at":"2026-11-23T10:00:00.000Z","updated_at":"2026-11-23T10:00:00.000Z"}
                """#
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: body)))
        }
        router.get("/dailyroundup/devices") { _, _ -> Response in
            Response(
                status: .forbidden, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(string: #"{"error":{"code":"account_frozen","message":"ask support","request_id":"r-2"}}"#)))
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let roundup = RoundupClient(
                serverURL: URL(string: "http://127.0.0.1:\(client.port!)")!, token: "t", transport: Self.transport,
                retry: RetryPolicy(attempts: 3, base: .milliseconds(50), ceiling: .seconds(2)))
            let change = try #require(try await roundup.changes().collect().first)
            #expect(change.changeType.known == nil && change.changeType.rawValue == "archive")
            #expect(change.changedFields.map(\.rawValue) == ["title", "mood"] && change.changedFields[0] == .title)
            let started = ContinuousClock.now
            let job = try await roundup.job("J")
            #expect(attempts.count == 2, "retried once after the 503")
            #expect(ContinuousClock.now - started >= .milliseconds(900), "after the server's Retry-After")
            #expect(job.status.known == nil && job.status.rawValue == "paused")
            do {
                _ = try await roundup.devices()
                Issue.record("a 403 was not thrown")
            } catch let error as RoundupError {
                #expect(error.status == 403 && error.code.known == nil && error.code.rawValue == "account_frozen")
                #expect(error.message == "ask support" && error.requestID == "r-2")
            }
        }
    }
}

/// Changes a test's reader task collects.
final class ReceivedChanges: Sendable {
    private let state = NIOLockedValueBox<(changes: [Change], count: Int)>(([], 0))
    func append(_ change: Change) { state.withLockedValue { $0.changes.append(change) } }
    func bump() { state.withLockedValue { $0.count += 1 } }
    var count: Int { state.withLockedValue { $0.count } }
    var cards: [String] { state.withLockedValue { $0.changes.map(\.trelloCardId) } }
    var ids: [Int] { state.withLockedValue { $0.changes.map(\.id) } }
}
