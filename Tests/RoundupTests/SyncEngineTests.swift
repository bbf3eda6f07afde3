import Foundation
import HTTPTypes
import NIOConcurrencyHelpers
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import RoundupClient
import RoundupCore
import RoundupSync
import RoundupTesting
import Testing

/// RoundupSync, the apps' sync loop, against the real roundup-api, ingress and worker with the fake Trello, through the
/// engine only: the flows a person makes, and a crash at the steps that could make something twice.
@Suite(.serialized) struct SyncEngineTests {
    /// Where a test's engine saves its state (the app's file), and the last state saved.
    final class SavedState: Sendable {
        private let box = NIOLockedValueBox<SyncState?>(nil)
        var last: SyncState? { box.withLockedValue { $0 } }
        var save: @Sendable (SyncState) async throws -> Void { { state in self.box.withLockedValue { $0 = state } } }
    }

    /// A transport that ends the process's work at one operation, as a crash would: before the request leaves
    /// (`before`), or after the server answered it, the answer lost (`after`).
    struct CrashingTransport: ClientTransport {
        enum When: Sendable { case before, after }
        let operation: String
        let when: When
        let inner: any ClientTransport

        func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
            if operationID == operation, when == .before { throw Crash() }
            let answer = try await inner.send(request, body: body, baseURL: baseURL, operationID: operationID)
            if operationID == operation { throw Crash() }
            return answer
        }
    }

    struct Crash: Error {}

    /// A store that crashes once after it made a reminder (before the engine learns its id).
    actor CrashAfterCreate: RemindersStore {
        let inner: InMemoryRemindersStore
        var crashed = false
        init(_ inner: InMemoryRemindersStore) { self.inner = inner }
        func reminders(inList listID: String) async throws -> [Reminder] { await inner.reminders(inList: listID) }
        func reminder(_ id: String) async throws -> Reminder? { await inner.reminder(id) }
        func create(_ values: ReminderValues, inList listID: String) async throws -> String {
            let id = await inner.create(values, inList: listID)
            if !crashed {
                crashed = true
                throw Crash()
            }
            return id
        }
        func update(_ id: String, _ values: ReminderValues) async throws { await inner.update(id, values) }
        func move(_ id: String, toList listID: String) async throws { await inner.move(id, toList: listID) }
        func delete(_ id: String) async throws { await inner.delete(id) }
    }

    /// A crash at the `at`-th step of one engine's life, whatever the step: a request leaving or its answer
    /// arriving, the state being saved (the crash comes before it is written), or the store's write done. After the
    /// crash every later step fails too (the process is gone), so nothing the engine does after it counts.
    final class CrashPlan: Sendable {
        let at: Int
        private let box = NIOLockedValueBox<(count: Int, steps: [String])>((0, []))
        init(at: Int) { self.at = at }
        var crashed: Bool { box.withLockedValue { $0.count >= at } }
        var steps: [String] { box.withLockedValue { $0.steps } }
        func step(_ name: String) throws {
            let count = box.withLockedValue { box in
                box.count += 1
                box.steps.append(name)
                return box.count
            }
            if count >= at { throw Crash() }
        }
    }

    struct PlannedTransport: ClientTransport {
        let plan: CrashPlan
        let inner: any ClientTransport
        func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
            try plan.step("\(operationID) sent")
            let answer = try await inner.send(request, body: body, baseURL: baseURL, operationID: operationID)
            try plan.step("\(operationID) answered")
            return answer
        }
    }

    struct PlannedStore: RemindersStore {
        let plan: CrashPlan
        let inner: InMemoryRemindersStore
        func reminders(inList listID: String) async throws -> [Reminder] { await inner.reminders(inList: listID) }
        func reminder(_ id: String) async throws -> Reminder? { await inner.reminder(id) }
        func create(_ values: ReminderValues, inList listID: String) async throws -> String {
            let id = await inner.create(values, inList: listID)
            try plan.step("store create")
            return id
        }
        func update(_ id: String, _ values: ReminderValues) async throws {
            await inner.update(id, values)
            try plan.step("store update")
        }
        func move(_ id: String, toList listID: String) async throws {
            await inner.move(id, toList: listID)
            try plan.step("store move")
        }
        func delete(_ id: String) async throws {
            await inner.delete(id)
            try plan.step("store delete")
        }
    }

    func start(_ backend: StoreBackend, worker: [String: String] = [:]) async throws -> (Stack, RoundupClient.Setup) {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: worker)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        stack.trello.addList(id: "Lsync", boardID: "Bsync")
        let setup = try await RoundupClient.setUp(
            serverURL: URL(string: "http://127.0.0.1:\(stack.apiPort)")!, bootstrapToken: SyncSetup.bootstrap,
            trello: .init(apiKey: "test-api-key", webhookSecret: stack.trello.webhookSecret, token: "test-token"),
            list: .init(name: "Errands", trelloBoardID: "Bsync", trelloListID: "Lsync"), transport: ClientTests.transport)
        return (stack, setup)
    }

    func device(_ setup: RoundupClient.Setup, _ id: String) async throws -> String {
        _ = try await setup.client.registerDevice(id: id, apnsToken: String(repeating: "ab", count: 32), platform: .ios)
        return id
    }

    /// A device's engine over `store`, the device registered, its state saved into a new `SavedState`.
    func makeEngine(_ setup: RoundupClient.Setup, _ deviceID: String, over store: any RemindersStore) async throws -> (RoundupSyncEngine, SavedState)
    {
        let saved = SavedState()
        let engine = try RoundupSyncEngine(client: setup.client, store: store, deviceID: try await device(setup, deviceID), saveState: saved.save)
        return (engine, saved)
    }

    /// The client of the same account through another transport (one that crashes).
    func client(_ setup: RoundupClient.Setup, _ transport: any ClientTransport) -> RoundupClient {
        RoundupClient(serverURL: setup.client.serverURL, token: setup.token, transport: transport)
    }

    @Test(arguments: StoreBackend.available) func theSeedFlowsEndToEndThroughTheEngine(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)

        // Cards made and edited in Trello reach the store; calls made at once (a push and the app's launch) take turns.
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Buy milk", desc: "2 litres", due: "2026-12-03T09:30:00.000Z")
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 1 })
        async let fetchedByPush = engine.fetchChanges()
        async let fetchedAtLaunch = engine.fetchChanges()
        async let sentAtLaunch = engine.sendChanges()
        let (byPush, atLaunch, sentFirst) = try await (fetchedByPush, fetchedAtLaunch, sentAtLaunch)
        #expect(byPush.total + atLaunch.total == 1 && sentFirst.count == 0)
        var reminders = await store.all
        #expect(reminders.count == 1)
        let milk = try #require(reminders.first)
        #expect(milk.listID == list && milk.values.title == "Buy milk" && milk.values.notes == "2 litres")
        #expect(milk.values.dueDate == .instant(Date(timeIntervalSince1970: 1_796_290_200)))
        #expect(try await setup.client.changes().collect().isEmpty, "the engine acknowledged the create")
        #expect(saved.last?.reminders[milk.id]?.cardID == card && saved.last?.appliedChanges.isEmpty == true)
        stack.trello.userUpdateCard(id: card, ["name": "Buy oat milk"])
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        #expect(await store.reminder(milk.id)?.values.title == "Buy oat milk")
        // What the engine wrote is not sent back.
        #expect(try await engine.sendChanges().count == 0)
        // A Trello edit the server has and the app has not fetched yet is not taken for the person's: a send before the
        // fetch leaves it, and the fetch brings it.
        stack.trello.userUpdateCard(id: card, ["name": "Buy oat milk and eggs"])
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 1 })
        #expect(try await engine.sendChanges().count == 0)
        #expect(stack.trello.cardValue(card)?["name"]?.stringValue == "Buy oat milk and eggs")
        #expect(try await engine.fetchChanges().total == 1)
        #expect(await store.reminder(milk.id)?.values.title == "Buy oat milk and eggs")

        // Reminders made, edited, completed and deleted in the store reach Trello.
        let bread = await store.create(ReminderValues(title: "Bread", dueDate: .day(year: 2026, month: 12, day: 4)), inList: list)
        var sent = try await engine.sendChanges()
        #expect(sent.statuses == [bread: "ok"])
        let breadCard = try #require(await engine.state.reminders[bread]?.cardID)
        #expect(stack.trello.cardValue(breadCard)?["name"]?.stringValue == "Bread")
        #expect(stack.trello.openCards(inList: "Lsync").count == 2)
        await store.edit(milk.id) { $0.notes = "oat, 1 litre" }
        await store.edit(bread) { $0.completed = true }
        sent = try await engine.sendChanges([milk.id, bread])
        #expect(sent.statuses == [milk.id: "ok", bread: "ok"])
        #expect(stack.trello.cardValue(card)?["desc"]?.stringValue == "oat, 1 litre")
        #expect(stack.trello.cardValue(breadCard)?["dueComplete"]?.boolValue == true)
        await store.delete(bread)
        sent = try await engine.sendChanges()
        #expect(sent.statuses == [bread: "ok"])
        #expect(stack.trello.openCards(inList: "Lsync").map { $0["id"]?.stringValue } == [card])
        // The server's echoes of those writes reach the apps as nothing, and nothing waits.
        try await Task.sleep(for: .seconds(1))
        #expect(try await engine.fetchChanges().total == 0)
        reminders = await store.all
        #expect(reminders.map(\.id) == [milk.id])
        #expect(try await engine.sendChanges().count == 0)
        await stack.shutdown()
    }

    /// A crash at every step of a sync, one after the other: round k crashes the engine at its k-th step (a request
    /// sent or answered, the state being saved, the store's write), restarts it from the state saved last, and counts.
    /// Each round brings its own work from both sides (a card made and one edited in Trello, a reminder made and one
    /// edited in the store), so every step of a sync is a step some round crashes at. No reminder and no card is
    /// made twice, and nothing is lost.
    @Test(arguments: StoreBackend.available) func aCrashAtEveryStepMakesNothingTwiceAndLosesNothing(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let memory = InMemoryRemindersStore()
        let saved = SavedState()
        let device = try await device(setup, "iphone")
        var trelloCards: [String] = []
        var reminders: [String] = []
        var crashedAt: Set<String> = []
        var round = 0
        while true {
            round += 1
            let card = stack.trello.userCreateCard(listID: "Lsync", name: "T\(round)")
            if let last = trelloCards.last { stack.trello.userUpdateCard(id: last, ["desc": .string("edited in round \(round)")]) }
            trelloCards.append(card)
            reminders.append(await memory.create(ReminderValues(title: "R\(round)"), inList: list))
            if reminders.count > 1 { await memory.edit(reminders[reminders.count - 2]) { $0.notes = "note of round \(round)" } }
            let arrived = try await TestSupport.eventually {
                let changes = try await setup.client.changes().collect()
                return changes.contains { $0.trelloCardId == card }
                    && (trelloCards.count < 2 || changes.contains { $0.trelloCardId == trelloCards[trelloCards.count - 2] })
            }
            try #require(arrived, "round \(round): Trello's edits reached the server")

            let plan = CrashPlan(at: round)
            let crashing = try RoundupSyncEngine(
                client: client(setup, PlannedTransport(plan: plan, inner: ClientTests.transport)), store: PlannedStore(plan: plan, inner: memory),
                deviceID: device, state: saved.last,
                saveState: { state in
                    try plan.step("save")
                    try await saved.save(state)
                })
            do { try await crashing.sync() } catch is Crash {}
            if plan.crashed { crashedAt.insert(plan.steps[round - 1]) }
            let engine = try RoundupSyncEngine(client: setup.client, store: memory, deviceID: device, state: saved.last, saveState: saved.save)
            try await engine.sync()

            // Counted, not sampled: every card and every reminder of every round, once.
            let open = stack.trello.openCards(inList: "Lsync")
            let stored = await memory.all
            for k in 1...round {
                #expect(open.filter { $0["name"]?.stringValue == "R\(k)" }.count == 1, "round \(round): one card for reminder R\(k)")
                #expect(stored.filter { $0.values.title == "T\(k)" }.count == 1, "round \(round): one reminder for card T\(k)")
            }
            #expect(open.count == 2 * round && stored.count == 2 * round, "round \(round): nothing else made")
            // Nothing lost: both edits of the round arrived.
            if round > 1 {
                let edited = stored.first { $0.values.title == "T\(round - 1)" }
                #expect(edited?.values.notes == "edited in round \(round)", "round \(round): Trello's edit reached the store")
                let sentCard = open.first { $0["name"]?.stringValue == "R\(round - 1)" }
                #expect(sentCard?["desc"]?.stringValue == "note of round \(round)", "round \(round): the store's edit reached Trello")
            }
            let mapped = saved.last?.reminders ?? [:]
            #expect(Set(stored.map(\.id)) == Set(mapped.keys), "round \(round): every reminder synced")
            #expect(
                Set(mapped.values.compactMap(\.cardID)) == Set(open.compactMap { $0["id"]?.stringValue }), "round \(round): each card one reminder's")
            #expect(saved.last?.outbound == nil && saved.last?.appliedChanges.isEmpty == true && saved.last?.creating.isEmpty == true)
            // The whole sync ran without reaching the crash: every step has been crashed at.
            if !plan.crashed { break }
            try #require(round < 80, "a sync of one round's work takes fewer than 80 steps")
        }
        // Every kind of step was among them.
        for kind in [
            "submitSync answered", "getSyncJob answered", "listChanges answered", "ackChanges sent", "ackChanges answered", "save", "store create",
            "store update",
        ] {
            #expect(crashedAt.contains(kind), "crashed at \(kind): \(crashedAt.sorted())")
        }
        await stack.shutdown()
    }

    /// Every field of a card, both ways, through the engine and a store that keeps them all: labels, checklists,
    /// attachments, the location and the due reminder reach the store typed; what the person changes of them reaches
    /// the card; what the card then holds (ids of new items and labels) comes back, and nothing goes back and forth.
    @Test(arguments: StoreBackend.available) func everyFieldOfACardBothWaysThroughTheEngine(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        CardRoundTripTests().board(stack, "Bsync")
        let store = InMemoryRemindersStore()
        let (engine, _) = try await makeEngine(setup, "mac", over: store)
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Tax return")
        stack.trello.userSetLabel(cardID: card, labelID: "lab-red", on: true)
        stack.trello.userSetLabel(cardID: card, labelID: "lab-green", on: true)
        let (checklist, items) = stack.trello.userAddChecklist(cardID: card, name: "Papers", items: ["Payslips", "Receipts"])
        stack.trello.userSetCheckItem(cardID: card, itemID: items[0], completed: true)
        let form = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/form", name: "Form")
        let pdf = stack.trello.userAddAttachment(
            cardID: card, url: "https://trello.com/x/2025.pdf", name: "2025.pdf", upload: true, mimeType: "application/pdf")
        stack.trello.userUpdateCard(id: card, ["dueReminder": .number(30)])
        stack.trello.userUpdateCard(id: card, ["locationName": "Tax office", "address": "1 Main St", "coordinates": "48.85,2.35"])
        stack.trello.userSetPriority(cardID: card, fieldID: "F1", optionID: "o-urgent")
        try await stack.quiet()
        try await engine.fetchChanges()
        let id = try #require(await store.all.first?.id)
        var values = try #require(await store.reminder(id)?.values)
        #expect(values.labels == [.init(id: "lab-red", name: "Urgent stuff", color: "red"), .init(id: "lab-green", name: "Home", color: "green")])
        #expect(
            values.checklists == [
                .init(
                    id: checklist, name: "Papers",
                    items: [.init(id: items[0], name: "Payslips", completed: true), .init(id: items[1], name: "Receipts")])
            ])
        #expect(values.attachments.map(\.id) == [form, pdf] && values.attachments.last?.isUpload == true && values.url == "https://example.com/form")
        #expect(values.location == Location(name: "Tax office", address: "1 Main St", latitude: 48.85, longitude: 2.35))
        #expect(values.dueReminderMinutes == 30)
        #expect(values.priority == 1, "the board's Urgent option, first of three")

        // The person changes each of them in the app.
        await store.edit(id) { values in
            values.labels = [.init(id: "lab-green", name: "Home", color: "green"), .init(name: "urgent stuff")]
            values.labels.removeFirst()
            values.labels.insert(.init(name: "Home"), at: 0)
            values.checklists[0].items[0].name = "Payslips of 2025"
            values.checklists[0].items[1].completed = true
            values.checklists[0].items.append(.init(name: "Bank statement"))
            values.checklists.append(.init(name: "Keys", items: [.init(name: "Spare key", completed: true)]))
            values.attachments.removeFirst()
            values.attachments.append(.init(name: "New quote", url: "https://example.com/new"))
            values.url = "https://example.com/new"
            values.location = Location(name: "New flat", address: "2 High St", latitude: 51.5, longitude: -0.12)
            values.dueReminderMinutes = 15
            values.priority = 5
        }
        let sent = try await engine.sendChanges([id])
        #expect(sent.statuses == [id: "ok"])
        let after = try #require(stack.trello.cardValue(card))
        #expect(Set(after["idLabels"]?.arrayValue?.compactMap(\.stringValue) ?? []) == ["lab-green", "lab-red"], "\(after)")
        let lists = after["checklists"]?.arrayValue ?? []
        #expect(lists.map { $0["name"] } == ["Papers", "Keys"], "\(lists)")
        let papers = lists.first?["checkItems"]?.arrayValue ?? []
        #expect(papers.map { $0["name"] } == ["Payslips of 2025", "Receipts", "Bank statement"])
        #expect(papers.map { $0["state"] } == ["complete", "complete", "incomplete"])
        #expect(lists.last?["checkItems"]?[0]?["state"] == "complete")
        #expect(after["attachments"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["2025.pdf", "New quote"])
        #expect(after["locationName"] == "New flat" && after["address"] == "2 High St" && after["dueReminder"] == .number(15))
        #expect(after["customFieldItems"]?[0]?["idValue"] == "o-high", "level 5 is the middle of three options")

        // What the card holds now (the new items', links' and labels' ids, the first link) the sender learns from its
        // job's result, not from a change; then nothing is left to send, and nothing comes back.
        values = try #require(await store.reminder(id)?.values)
        #expect(values.url == "https://example.com/new")
        #expect(values.labels.allSatisfy { $0.id != nil } && values.labels.count == 2)
        #expect(values.checklists.flatMap(\.items).allSatisfy { $0.id != nil } && values.checklists.count == 2)
        #expect(values.attachments.allSatisfy { $0.id != nil } && values.attachments.count == 2)
        #expect(try await engine.sendChanges().count == 0)
        try await stack.quiet()
        #expect(try await engine.fetchChanges().total == 0)

        // A checklist and an item deleted in the app are deleted on the card.
        await store.edit(id) { values in
            values.checklists.removeLast()
            values.checklists[0].items.removeLast()
        }
        #expect(try await engine.sendChanges([id]).statuses == [id: "ok"])
        let trimmed = stack.trello.cardValue(card)?["checklists"]?.arrayValue ?? []
        #expect(trimmed.count == 1 && trimmed.first?["checkItems"]?.arrayValue?.count == 2, "\(trimmed)")
        await stack.shutdown()
    }

    /// A store that keeps only what `EKReminder` holds itself (`ReminderField.basic`): the card's labels, checklists,
    /// links, location and due reminder are never taken for the person's (emptied) edits, and stay on the card.
    @Test func aStoreThatKeepsFewerFieldsLeavesTheOthersOnTheCard() async throws {
        let (stack, setup) = try await start(.sqlite)
        defer { Task { await stack.shutdown() } }
        CardRoundTripTests().board(stack, "Bsync")
        let store = InMemoryRemindersStore(carrying: ReminderField.basic)
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Tax return")
        stack.trello.userSetLabel(cardID: card, labelID: "lab-red", on: true)
        _ = stack.trello.userAddChecklist(cardID: card, name: "Papers", items: ["Payslips"])
        _ = stack.trello.userAddAttachment(cardID: card, url: "https://example.com/form", name: "Form")
        stack.trello.userUpdateCard(id: card, ["dueReminder": .number(30), "locationName": "Tax office", "address": "1 Main St"])
        try await stack.quiet()
        try await engine.fetchChanges()
        let reminder = try #require(await store.all.first)
        #expect(reminder.values.title == "Tax return" && reminder.values.url == "https://example.com/form")
        #expect(reminder.values.labels.isEmpty && reminder.values.checklists.isEmpty && reminder.values.location == nil)
        #expect(saved.last?.reminders[reminder.id]?.values == reminder.values, "the state keeps what the store keeps")
        await store.edit(reminder.id) { $0.title = "Tax return 2025" }
        #expect(try await engine.sendChanges().statuses == [reminder.id: "ok"])
        let after = try #require(stack.trello.cardValue(card))
        #expect(after["name"] == "Tax return 2025" && after["idLabels"] == .array(["lab-red"]))
        #expect(after["checklists"]?.arrayValue?.count == 1 && after["attachments"]?.arrayValue?.count == 1)
        #expect(after["dueReminder"] == .number(30) && after["locationName"] == "Tax office")
        // A reminder made in that store makes a card with what it has, and nothing more is sent.
        let made = await store.create(ReminderValues(title: "Post the forms"), inList: setup.list.syncListId)
        #expect(try await engine.sendChanges().statuses == [made: "ok"])
        try await stack.quiet()
        try await engine.fetchChanges()
        #expect(try await engine.sendChanges().count == 0)
        await stack.shutdown()
    }

    /// In the foreground the engine reads the live stream: a Trello edit reaches the store with no fetch called, is
    /// acknowledged, and the engine stops when the app leaves the foreground (its task cancelled).
    @Test func theLiveStreamAppliesTrelloEditsWhileTheAppIsInTheForeground() async throws {
        let (stack, setup) = try await start(.sqlite)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let foreground = Task { try await engine.runWhileForeground() }
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Seen live")
        #expect(await TestSupport.eventually { await store.all.count == 1 })
        stack.trello.userUpdateCard(id: card, ["name": "Renamed live"])
        #expect(await TestSupport.eventually { await store.all.first?.values.title == "Renamed live" })
        #expect(await TestSupport.eventually { (try? await setup.client.changes().collect().isEmpty) == true }, "acknowledged")
        #expect(saved.last?.reminders.values.map(\.cardID) == [card])
        foreground.cancel()
        _ = await foreground.result
        // Back in the background: edits wait for a push or a fetch.
        stack.trello.userUpdateCard(id: card, ["name": "Renamed in the background"])
        try await stack.quiet()
        #expect(await store.all.first?.values.title == "Renamed live")
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        #expect(await store.all.map(\.values.title) == ["Renamed in the background"])

        // Trello renames the card while the app is away; the person renames the reminder after it, before the app is in
        // the foreground again. The stream brings Trello's edit; the engine sends the person's first, so it is not
        // overwritten unseen: the server settles the two by the list's policy, here the default (`manual`): a conflict
        // the app is told of, with both values, Trello's standing until the person chooses. Choosing theirs brings it
        // to the card and back to the store.
        stack.trello.userUpdateCard(id: card, ["name": "Trello's earlier name"])
        try await stack.quiet()
        try await Task.sleep(for: .milliseconds(20))
        let reminder = try #require(await store.all.first)
        var edited = reminder.values
        edited.title = "The person's later name"
        await store.update(reminder.id, edited)
        let told = NIOLockedValueBox<[Int]>([])
        let listening = Task { for await event in engine.events { if case .conflicts(let ids) = event { told.withLockedValue { $0 += ids } } } }
        defer { listening.cancel() }
        let again = Task { try await engine.runWhileForeground() }
        #expect(await TestSupport.eventually { told.withLockedValue { $0.count } == 1 }, "the app is told of the conflict")
        let conflict = try #require(try await setup.client.conflicts().first { $0.id == told.withLockedValue { $0.first } })
        #expect(conflict.field.rawValue == "title" && conflict.reminderId == reminder.id)
        #expect(conflict.remindersValue.value as? String == "The person's later name")
        #expect(conflict.trelloValue.value as? String == "Trello's earlier name")
        #expect(await TestSupport.eventually { await store.all.map(\.values.title) == ["Trello's earlier name"] }, "Trello's stands meanwhile")
        _ = try await setup.client.resolveConflict(conflict.id, choice: .reminders)
        #expect(await TestSupport.eventually { stack.trello.cardValue(card)?["name"]?.stringValue == "The person's later name" })
        #expect(await TestSupport.eventually { await store.all.map(\.values.title) == ["The person's later name"] })
        #expect(await TestSupport.eventually { (try? await setup.client.changes().collect().isEmpty) == true }, "acknowledged")
        again.cancel()
        _ = await again.result
        await stack.shutdown()
    }

    /// A transport that takes `delay` before each request leaves (as a phone's network does), cancellable meanwhile.
    struct SlowTransport: ClientTransport {
        let delay: Duration
        let inner: any ClientTransport
        func send(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String) async throws -> (HTTPResponse, HTTPBody?) {
            try await Task.sleep(for: delay)
            return try await inner.send(request, body: body, baseURL: baseURL, operationID: operationID)
        }
    }

    /// A background sync cut short at iOS's deadline (its task cancelled), at a later point each round: the same engine
    /// goes on at the next call, and in the end every card is one reminder and every reminder one card, each edit in.
    @Test func aSyncCancelledAtItsDeadlineGoesOnAtTheNextCall() async throws {
        let (stack, setup) = try await start(.sqlite)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let saved = SavedState()
        let engine = try RoundupSyncEngine(
            client: client(setup, SlowTransport(delay: .milliseconds(15), inner: ClientTests.transport)), store: store,
            deviceID: try await device(setup, "iphone"), saveState: saved.save)
        var cards: [String] = []
        var cut = 0
        for round in 1...10 {
            cards.append(stack.trello.userCreateCard(listID: "Lsync", name: "T\(round)"))
            _ = await store.create(ReminderValues(title: "R\(round)"), inList: list)
            if round > 1 { stack.trello.userUpdateCard(id: cards[round - 2], ["desc": .string("edited in round \(round)")]) }
            try await stack.quiet()
            let sync = Task { try await engine.sync() }
            try await Task.sleep(for: .milliseconds(25 * round))
            sync.cancel()
            if case .failure = await sync.result { cut += 1 }
        }
        #expect(cut >= 5, "most rounds were cut short (\(cut) of 10)")
        try await engine.sync()
        try await stack.quiet()
        try await engine.sync()
        let open = stack.trello.openCards(inList: "Lsync")
        let stored = await store.all
        for k in 1...10 {
            #expect(open.filter { $0["name"]?.stringValue == "R\(k)" }.count == 1, "one card for reminder R\(k)")
            #expect(stored.filter { $0.values.title == "T\(k)" }.count == 1, "one reminder for card T\(k)")
        }
        #expect(open.count == 20 && stored.count == 20)
        for k in 1..<10 { #expect(stored.first { $0.values.title == "T\(k)" }?.values.notes == "edited in round \(k + 1)") }
        #expect(saved.last?.outbound == nil && saved.last?.appliedChanges.isEmpty == true && saved.last?.creating.isEmpty == true)
        // Nothing left for this device (the cards made for its reminders are news for the person's other devices only).
        let left = try await setup.client.changesPage(after: 0, limit: 200, deviceID: "iphone").changes
        #expect(left.isEmpty, "\(left.map { ($0.id, $0.changeType.rawValue, $0.trelloCardId, $0.changedFields) })")
        await stack.shutdown()
    }

    /// The person adds the same thing on both sides before a sync (a card in Trello, a reminder on the phone): the
    /// reminder sent first is a possible duplicate of the card (held, said once, no card made); the card's create then
    /// takes that reminder rather than making a second one. One card, one reminder.
    @Test(arguments: StoreBackend.available) func theSameItemAddedOnBothSidesBecomesOneCardAndOneReminder(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let attention = Task { () -> [String] in
            var said: [String] = []
            for await event in engine.events { if case .needsAttention(let message) = event { said.append(message) } }
            return said
        }
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Buy stamps")
        try await stack.quiet()
        let made = await store.create(ReminderValues(title: "Buy stamps"), inList: setup.list.syncListId)
        #expect(try await engine.sendChanges().statuses == [made: "duplicate"])
        #expect(try await setup.client.duplicates().map(\.status.rawValue) == ["open"])
        #expect(stack.trello.cardsCreated == 0)
        #expect(try await engine.sendChanges().count == 0, "held: not posted again")
        #expect(try await engine.fetchChanges().applied == ["create": 1])
        #expect(await store.all.map(\.id) == [made], "the card's create took the reminder")
        #expect(saved.last?.reminders[made]?.cardID == card)
        // Acknowledged with that reminder, the create settled the possible duplicate: the person has nothing to choose.
        #expect(try await setup.client.duplicates().map(\.status.rawValue) == ["merged"])
        #expect(try await engine.sendChanges().count == 0)
        #expect(stack.trello.openCards(inList: "Lsync").count == 1 && stack.trello.cardsCreated == 0)
        try await stack.quiet()
        #expect(try await engine.fetchChanges().total == 0)
        attention.cancel()
        await stack.shutdown()
        let said = await attention.value
        #expect(said.contains { $0.contains(made) && $0.contains("duplicate") }, "\(said)")
    }

    /// A crash after applying changes, before acknowledging them: the engine restarted from the last state saved makes
    /// no second reminder, and the changes are acknowledged.
    @Test(arguments: StoreBackend.available) func aCrashBetweenApplyingAndAcknowledgingMakesNoSecondReminder(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let saved = SavedState()
        let device = try await device(setup, "mac")
        let cards = (1...3).map { stack.trello.userCreateCard(listID: "Lsync", name: "Card \($0)") }
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 3 })

        for when in [CrashingTransport.When.before, .after] {
            let crashing = try RoundupSyncEngine(
                client: client(setup, CrashingTransport(operation: "ackChanges", when: when, inner: ClientTests.transport)), store: store,
                deviceID: device, state: saved.last, saveState: saved.save)
            await #expect(throws: Crash.self) { try await crashing.fetchChanges() }
            #expect(await store.all.count == 3, "each card made once before the crash (\(when))")
            #expect(saved.last?.appliedChanges.count == 3, "applied, saved before the acknowledgement")
            if when == .before { continue }
            // Restarted: the acknowledgement (already made, its answer lost) is made again, nothing applied twice.
            let engine = try RoundupSyncEngine(client: setup.client, store: store, deviceID: device, state: saved.last, saveState: saved.save)
            #expect(try await engine.fetchChanges().total == 0)
            #expect(saved.last?.appliedChanges.isEmpty == true)
        }
        let reminders = await store.all
        #expect(reminders.count == 3)
        #expect(Set(cards) == Set(reminders.compactMap { saved.last?.reminders[$0.id]?.cardID }))
        #expect(try await setup.client.changes().collect().isEmpty)
        // And the cards know their reminders: an edit in Trello reaches the same reminder.
        stack.trello.userUpdateCard(id: cards[0], ["name": "Card 1, renamed"])
        let engine = try RoundupSyncEngine(client: setup.client, store: store, deviceID: device, state: saved.last, saveState: saved.save)
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        #expect(await store.all.count == 3)
        #expect(await store.all.contains { $0.values.title == "Card 1, renamed" })
        await stack.shutdown()
    }

    /// A crash after the store made a reminder, before the engine learned its id: the restarted engine finds it (an
    /// unmapped reminder of the list with the change's values) and makes no second one.
    @Test(arguments: StoreBackend.available) func aCrashWhileMakingAReminderMakesNoSecondOne(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let memory = InMemoryRemindersStore()
        let saved = SavedState()
        let device = try await device(setup, "iphone")
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Call the plumber")
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 1 })
        let crashing = try RoundupSyncEngine(client: setup.client, store: CrashAfterCreate(memory), deviceID: device, saveState: saved.save)
        await #expect(throws: Crash.self) { try await crashing.fetchChanges() }
        #expect(saved.last?.creating.map(\.cardID) == [card] && saved.last?.reminders.isEmpty == true)
        let engine = try RoundupSyncEngine(client: setup.client, store: memory, deviceID: device, state: saved.last, saveState: saved.save)
        #expect(try await engine.fetchChanges().total == 0)
        let reminders = await memory.all
        #expect(reminders.count == 1)
        #expect(saved.last?.reminders[reminders[0].id]?.cardID == card && saved.last?.creating.isEmpty == true)
        #expect(try await setup.client.changes().collect().isEmpty, "acknowledged with the reminder found")
        await stack.shutdown()
    }

    /// A crash after posting the person's edits, before the server's answer: the restarted engine posts the same
    /// batch with the same key, and Trello gets one card.
    @Test(arguments: StoreBackend.available) func aCrashAfterPostingMakesNoSecondCard(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let saved = SavedState()
        let device = try await device(setup, "iphone")
        let made = await store.create(ReminderValues(title: "Renew passport", notes: "before March"), inList: list)
        let crashing = try RoundupSyncEngine(
            client: client(setup, CrashingTransport(operation: "submitSync", when: .after, inner: ClientTests.transport)), store: store,
            deviceID: device, saveState: saved.save)
        await #expect(throws: Crash.self) { try await crashing.sendChanges() }
        let batch = try #require(saved.last?.outbound)
        #expect(batch.changes.map(\.reminderId) == [made] && batch.jobID == nil)
        // The job the lost answer named runs meanwhile; restarted, the engine posts the batch again with its key.
        try await Task.sleep(for: .seconds(1))
        let engine = try RoundupSyncEngine(client: setup.client, store: store, deviceID: device, state: saved.last, saveState: saved.save)
        let sent = try await engine.sendChanges()
        #expect(sent.statuses == [made: "ok"])
        #expect(stack.trello.openCards(inList: "Lsync").count == 1)
        #expect(stack.trello.cardsCreated == 1)
        #expect(saved.last?.outbound == nil && saved.last?.reminders[made]?.cardID != nil)
        #expect(try await engine.sendChanges().count == 0)
        await stack.shutdown()
    }

    /// The iPhone and the Mac, one person's reminders shared through iCloud, woken together by the same push: each
    /// change is applied by one of them, iCloud brings each reminder to the other, and the other learns its card from
    /// the server (a create for a reminder the account maps makes no card). No duplicate reminder, no duplicate card.
    @Test(arguments: StoreBackend.available) func twoDevicesWokenTogetherConvergeWithoutDuplicates(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let cloud = SharedReminders()
        let (iphone, mac) = (await cloud.device("iphone"), await cloud.device("mac"))
        let (iphoneState, macState) = (SavedState(), SavedState())
        let iphoneEngine = try RoundupSyncEngine(
            client: setup.client, store: iphone, deviceID: try await device(setup, "iphone"), saveState: iphoneState.save)
        let macEngine = try RoundupSyncEngine(client: setup.client, store: mac, deviceID: try await device(setup, "mac"), saveState: macState.save)

        let cards = (1...8).map { stack.trello.userCreateCard(listID: "Lsync", name: "Card \($0)") }
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 8 })
        async let onIPhone = iphoneEngine.fetchChanges()
        async let onMac = macEngine.fetchChanges()
        let (fromIPhone, fromMac) = try await (onIPhone, onMac)
        #expect(fromIPhone.total + fromMac.total == 8, "each change applied by one device: \(fromIPhone.total) + \(fromMac.total)")
        #expect(try await setup.client.changes().collect().isEmpty)
        await cloud.propagate()
        #expect(await iphone.all.count == 8)
        #expect(await mac.all.count == 8)

        // Each device sends what it sees: the other's reminders are new to it, and the server's cards name them.
        async let sentByIPhone = iphoneEngine.sendChanges()
        _ = try await sentByIPhone
        _ = try await macEngine.sendChanges()
        #expect(stack.trello.cardsCreated == 0, "no card made for a reminder iCloud brought")
        #expect(stack.trello.openCards(inList: "Lsync").count == 8)
        for state in [iphoneState, macState] {
            #expect(Set(state.last?.reminders.values.compactMap(\.cardID) ?? []) == Set(cards))
        }

        // A reminder made on the Mac reaches Trello once; a Trello edit reaches the reminder whichever device applies it.
        let made = await mac.create(ReminderValues(title: "Made on the Mac"), inList: list)
        #expect(try await macEngine.sendChanges().statuses == [made: "ok"])
        await cloud.propagate()
        #expect(try await iphoneEngine.sendChanges().count == 0, "the iPhone learns the card from the server")
        #expect(iphoneState.last?.reminders[made]?.cardID != nil)
        #expect(stack.trello.openCards(inList: "Lsync").count == 9 && stack.trello.cardsCreated == 1)
        let madeCard = try #require(macState.last?.reminders[made]?.cardID)
        stack.trello.userUpdateCard(id: madeCard, ["name": "Renamed in Trello"])
        // (Both may fetch more than the rename: the server told the iPhone what Trello keeps of the Mac's new card.)
        #expect(
            try await TestSupport.eventually {
                async let a = iphoneEngine.fetchChanges()
                async let b = macEngine.fetchChanges()
                _ = try await (a, b)
                await cloud.propagate()
                return await iphone.reminder(made)?.values.title == "Renamed in Trello"
            })
        for device in [iphone, mac] {
            let all = await device.all
            #expect(all.count == 9)
            #expect(all.first { $0.id == made }?.values.title == "Renamed in Trello")
        }
        #expect(try await iphoneEngine.sendChanges().count == 0, "no echo")
        #expect(try await macEngine.sendChanges().count == 0, "no echo")

        // A card deleted in Trello does not come back from the Mac's copy iCloud has not deleted yet: the iPhone made
        // its reminder and applied its delete; the Mac, with no copy of its own, would send the reminder as new.
        let brief = stack.trello.userCreateCard(listID: "Lsync", name: "Here briefly")
        #expect(try await TestSupport.eventually { try await iphoneEngine.fetchChanges().total == 1 })
        await cloud.propagate()
        let briefReminder = try #require(await mac.all.first { $0.values.title == "Here briefly" })
        stack.trello.userDeleteCard(id: brief)
        #expect(try await TestSupport.eventually { try await iphoneEngine.fetchChanges().total == 1 })
        #expect(await iphone.reminder(briefReminder.id) == nil && stack.trello.cardsCreated == 1)
        let fromStaleCopy = try await macEngine.sendChanges()
        #expect(fromStaleCopy.statuses == [briefReminder.id: "skipped"], "\(fromStaleCopy)")
        #expect(stack.trello.cardsCreated == 1 && stack.trello.openCards(inList: "Lsync").count == 9, "the card stays deleted")
        await cloud.propagate()
        #expect(await mac.reminder(briefReminder.id) == nil)
        #expect(try await macEngine.sendChanges().count == 0)
        await stack.shutdown()
    }

    /// A reminder moved between two synced lists in the app moves its card (the same card), and a card moved in Trello
    /// moves the reminder (the same reminder).
    @Test(arguments: StoreBackend.available) func movesBothWaysKeepOneCardAndOneReminder(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        stack.trello.addList(id: "Lsync2", boardID: "Bsync")
        let later = try await setup.client.pairList(.init(name: "Later", trelloBoardID: "Bsync", trelloListID: "Lsync2")).syncListId
        let today = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Water the plants")
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        let reminder = try #require(await store.all.first)

        await store.move(reminder.id, toList: later)
        #expect(try await engine.sendChanges().statuses == [reminder.id: "ok"])
        #expect(stack.trello.cardValue(card)?["idList"]?.stringValue == "Lsync2")
        #expect(stack.trello.cardsCreated == 0 && stack.trello.openCards(inList: "Lsync2").count == 1)
        try await Task.sleep(for: .seconds(1))
        #expect(try await engine.fetchChanges().total == 0, "the move's echo is nothing")

        stack.trello.userUpdateCard(id: card, ["idList": "Lsync"])
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().applied["move"] == 1 })
        let all = await store.all
        #expect(all.count == 1 && all.first?.id == reminder.id && all.first?.listID == today)
        #expect(saved.last?.reminders[reminder.id]?.listID == today)
        #expect(try await engine.sendChanges().count == 0)

        // Another device whose copy is still in the first list, after Trello moved the card (it reads the list before
        // the move, or sends without reading): its `create` makes no second card.
        stack.trello.userUpdateCard(id: card, ["idList": "Lsync2"])
        try await stack.quiet()
        let late = try await setup.client.sync(
            deviceID: try await device(setup, "mac"),
            changes: [
                SyncChange(op: .create, syncListId: today, reminderId: reminder.id, fields: SyncFields(title: "Water the plants"), modifiedAt: Date())
            ],
            idempotencyKey: RoundupClient.makeIdempotencyKey())
        #expect(late.results.first?.status.known == .skipped && late.results.first?.trelloCardId == card, "\(late.results)")
        #expect(stack.trello.cardsCreated == 0 && stack.trello.openCards(inList: "Lsync2").count == 1)
        await stack.shutdown()
    }

    /// A push from the server, as the app hands it over: the engine reads the lists (a list archived in Trello is an
    /// event, and its reminders' edits wait until it is restored) and syncs.
    @Test(arguments: StoreBackend.available) func aPushSyncsAndAnArchivedListHoldsItsEditsUntilRestored(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let events = Task { () -> [String] in
            var seen: [String] = []
            for await event in engine.events {
                if case .listChanged(let list) = event { seen.append("\(list.name) archived=\(list.archived)") }
            }
            return seen
        }
        #expect(RoundupSyncEngine.isServerNotification(["aps": ["content-available": 1], "roundup": ["sync": 1]]))
        #expect(!RoundupSyncEngine.isServerNotification(["aps": ["alert": "someone else's"]]))
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Pick up parcel")
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 1 })
        try await engine.handleRemoteNotification()
        let reminder = try #require(await store.all.first)

        stack.trello.userUpdateList(id: "Lsync", closed: true)
        #expect(try await TestSupport.eventually { try await setup.client.lists().first?.archived == true })
        try await engine.handleRemoteNotification()
        #expect(saved.last?.lists[setup.list.syncListId]?.archived == true)
        await store.edit(reminder.id) { $0.notes = "at the post office" }
        #expect(try await engine.sendChanges().count == 0, "paused: the edit waits")
        stack.trello.userUpdateList(id: "Lsync", closed: false)
        #expect(try await TestSupport.eventually { try await setup.client.lists().first?.archived == false })
        try await engine.handleRemoteNotification()
        #expect(stack.trello.cardValue(card)?["desc"]?.stringValue == "at the post office")
        #expect(saved.last?.reminders[reminder.id]?.values.notes == "at the post office")
        events.cancel()
        #expect(await events.value == ["Errands archived=true", "Errands archived=false"])
        await stack.shutdown()
    }

    /// A new device, or the app reinstalled: an empty state over reminders the store already has (iCloud brought
    /// them). The engine learns their cards from the server and sends nothing; a card it had no reminder for stays one.
    @Test(arguments: StoreBackend.available) func anEmptyStateOverExistingRemindersMakesNothingTwice(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let first = try RoundupSyncEngine(
            client: setup.client, store: store, deviceID: try await device(setup, "iphone"), saveState: SavedState().save)
        for n in 1...5 { _ = stack.trello.userCreateCard(listID: "Lsync", name: "Card \(n)") }
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().count == 5 })
        #expect(try await first.fetchChanges().total == 5)

        let saved = SavedState()
        let reinstalled = try RoundupSyncEngine(
            client: setup.client, store: store, deviceID: try await device(setup, "iphone-2"), saveState: saved.save)
        #expect(try await reinstalled.sendChanges().count == 0)
        #expect(saved.last?.reminders.count == 5 && saved.last?.reminders.values.allSatisfy { $0.cardID != nil } == true)
        #expect(try await reinstalled.fetchChanges().total == 0)
        #expect(await store.all.count == 5)
        #expect(stack.trello.cardsCreated == 0 && stack.trello.openCards(inList: "Lsync").count == 5)
        await stack.shutdown()
    }

    /// The state is bounded by the reminders, not by history: a full sync of 1,000 reminders (sent in jobs of 100),
    /// then rounds of edits of every card in Trello fetched and applied, leave it the same size (a reminder's values as
    /// long as they were). `ROUNDUP_TEST_ENGINE_ROUNDS` (default 2) sets the rounds: 10 is 10,000 synced changes
    /// (docs/BENCHMARKS.md).
    @Test func theStateStaysTheSizeOfTheRemindersOverManyChanges() async throws {
        let rounds = Int(ProcessInfo.processInfo.environment["ROUNDUP_TEST_ENGINE_ROUNDS"] ?? "") ?? 2
        // The fake Trello has no rate limit; ours (100 requests per 10 s per token) would pace the 1,000 cards' writes.
        let (stack, setup) = try await start(.sqlite, worker: ["ROUNDUP_TRELLO_TOKEN_LIMIT": "100000", "ROUNDUP_TRELLO_KEY_LIMIT": "100000"])
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "mac", over: store)
        for n in 0..<1_000 { _ = await store.create(ReminderValues(title: "Reminder \(n)", notes: "note \(n)"), inList: list) }
        let sent = try await engine.sendChanges()
        #expect(sent.count == 1_000 && Set(sent.statuses.values) == ["ok"])
        #expect(stack.trello.openCards(inList: "Lsync").count == 1_000)
        func size() throws -> Int { try JSONEncoder().encode(saved.last ?? SyncState()).count }
        let afterFullSync = try size()
        print("sync engine state: \(afterFullSync) bytes after a full sync of 1,000 reminders; process resident \(residentBytes()) bytes")
        let cards = saved.last?.reminders.values.compactMap { $0.cardID } ?? []
        #expect(cards.count == 1_000)
        for round in 1...rounds {
            for (n, card) in cards.enumerated() { stack.trello.userUpdateCard(id: card, ["name": .string("R\(round) \(n)")]) }
            var applied = 0
            #expect(
                try await TestSupport.eventually(timeout: .seconds(120)) {
                    applied += try await engine.fetchChanges().total
                    return applied >= 1_000
                })
            let now = try size()
            print("sync engine state: \(now) bytes after \(round * 1_000) changes applied; process resident \(residentBytes()) bytes")
            // Each title is as long as before, give or take its digits.
            #expect(abs(now - afterFullSync) < 20_000, "round \(round): \(now) against \(afterFullSync)")
            #expect(saved.last?.reminders.count == 1_000 && saved.last?.appliedChanges.isEmpty == true && saved.last?.creating.isEmpty == true)
        }
        #expect(await store.all.count == 1_000)
        await stack.shutdown()
    }

    /// This whole process's resident memory (the stack's fake Trello and the test's reminders included), from
    /// `/proc/self/statm`: printed beside the state's size, for docs/BENCHMARKS.md; -1 where there is no /proc.
    func residentBytes() -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return -1 }
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return -1 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// A repeating reminder completed in Trello: the store (EventKit) opens its next occurrence, and the engine sends
    /// what the store reports, so the card comes back open with the next due date.
    @Test(arguments: StoreBackend.available) func aRepeatingReminderCompletedInTrelloComesBackWithItsNextDate(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let store = InMemoryRemindersStore()
        let engine = try RoundupSyncEngine(
            client: setup.client, store: store, deviceID: try await device(setup, "iphone"), saveState: SavedState().save)
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Water the plants", due: "2026-12-01T08:00:00.000Z")
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        let reminder = try #require(await store.all.first)
        await store.setRepeating(reminder.id, everyDays: 7)

        stack.trello.userUpdateCard(id: card, ["dueComplete": true])
        #expect(try await TestSupport.eventually { try await engine.fetchChanges().total == 1 })
        let next = try #require(await store.reminder(reminder.id))
        #expect(!next.values.completed && next.values.dueDate == .instant(Date(timeIntervalSince1970: 1_796_112_000 + 7 * 86_400)))
        #expect(try await engine.sendChanges().statuses == [reminder.id: "ok"])
        #expect(stack.trello.cardValue(card)?["dueComplete"]?.boolValue == false)
        #expect(stack.trello.cardValue(card)?["due"]?.stringValue == "2026-12-08T08:00:00.000Z")
        try await Task.sleep(for: .seconds(1))
        #expect(try await engine.fetchChanges().total == 0, "the echo of the next occurrence is nothing")
        #expect(try await engine.sendChanges().count == 0)
        await stack.shutdown()
    }

    /// An edit the server refuses (a link that is not http(s), as Siri leaves on a reminder) is said once and held: not
    /// posted again on every EventKit notification, and sent again when the person changes the reminder. A restart after
    /// a crash that came while the store made a reminder sends nothing for it (it is the change's, found first).
    @Test(arguments: StoreBackend.available) func aRefusedEditIsHeldUntilTheReminderChanges(backend: StoreBackend) async throws {
        let (stack, setup) = try await start(backend)
        defer { Task { await stack.shutdown() } }
        let list = setup.list.syncListId
        let store = InMemoryRemindersStore()
        let (engine, saved) = try await makeEngine(setup, "iphone", over: store)
        let made = await store.create(ReminderValues(title: "Reply to Anna", url: "message://%3c1234@example.com%3e"), inList: list)
        #expect(try await engine.sendChanges().statuses == [made: "error"])
        #expect(saved.last?.held[made] != nil && saved.last?.reminders[made] == nil)
        #expect(try await engine.sendChanges().count == 0, "held: not posted again")
        #expect(stack.trello.cardsCreated == 0)
        await store.edit(made) { $0.url = "https://mail.example.com/1234" }
        #expect(try await engine.sendChanges().statuses == [made: "ok"])
        #expect(saved.last?.held.isEmpty == true && stack.trello.cardsCreated == 1)

        // A crash while the store made a reminder for a card, then the app's next call is a send: the reminder is the
        // change's, not a new one of the person's.
        let memory = store
        let card = stack.trello.userCreateCard(listID: "Lsync", name: "Book the dentist")
        // (The server also told the account's other devices what Trello keeps of the first card: not this device's.)
        #expect(try await TestSupport.eventually { try await setup.client.changes().collect().contains { $0.trelloCardId == card } })
        let crashing = try RoundupSyncEngine(
            client: setup.client, store: CrashAfterCreate(memory), deviceID: "iphone", state: saved.last, saveState: saved.save)
        await #expect(throws: Crash.self) { try await crashing.fetchChanges() }
        let restarted = try RoundupSyncEngine(client: setup.client, store: memory, deviceID: "iphone", state: saved.last, saveState: saved.save)
        #expect(try await restarted.sendChanges().count == 0)
        #expect(stack.trello.cardsCreated == 1 && stack.trello.openCards(inList: "Lsync").count == 2)
        #expect(try await restarted.fetchChanges().total == 0)
        #expect(await memory.all.count == 2)
        #expect(saved.last?.reminders.values.contains { $0.cardID == card } == true)
        await stack.shutdown()
    }
}
