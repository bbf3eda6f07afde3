import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// Links in the description instead of attachments (#34 item 5): the list setting `move_links_to_notes` for what the
/// apps send, and the `migrate_links` job for what the cards hold already; through the real processes and the fake Trello.
@Suite(.serialized) struct LinkMigrationTests {
    /// The migration job's progress is written per card: stale after 12 s without a heartbeat (beats every second), an
    /// idle entry claimed after 3 s, so a worker that died is taken over well before its job reads as stale.
    static let takeover = ["ROUNDUP_JOB_STALE_SECONDS": "12", "ROUNDUP_JOB_HEARTBEAT_SECONDS": "1", "ROUNDUP_CLAIM_IDLE_MS": "3000"]

    func attachmentIDs(_ card: [String: JSONValue]?) -> [String] {
        (card?["attachments"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
    }

    /// Starts a migration of the list and waits for it to end; returns the job.
    func migrate(_ s: SyncSetup, timeout: Duration = .seconds(90)) async throws -> JSONValue {
        let started = try await s.stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/migrate-links", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        return try await s.wait(job: try #require(started.json["job_id"]?.stringValue), timeout: timeout)
    }

    @Test(arguments: StoreBackend.available) func linksTheAppsSendGoToTheNotesOnAListThatMovesThem(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lnotes", board: "Bnotes", listSettings: .object(["move_links_to_notes": true]))
        let listed = try await stack.callAPI(.GET, "/dailyroundup/lists/\(s.listID)", token: s.token)
        #expect(listed.json["settings"]?["move_links_to_notes"] == true, "\(listed.body)")
        let card = stack.trello.userCreateCard(listID: "Lnotes", name: "Plan the trip", desc: "Book early")
        stack.trello.userAddAttachment(cardID: card, url: "https://example.com/old", name: "Old quote")
        let scan = stack.trello.userAddAttachment(
            cardID: card, url: "https://trello.com/x/map.png", name: "map.png", upload: true, mimeType: "image/png")
        var view: [String: JSONValue] = [:]
        _ = try await CardRoundTripTests().pull(s, into: &view)
        #expect(view["url"] == "https://example.com/old")

        // The app adds a named link and replaces the reminder's URL.
        let job = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)",
                fields: ["url": "https://example.com/new", "attachments": .array([.object(["url": "https://example.com/spec", "name": "Spec"])])],
                changed: ["url", "attachments"])
        ])
        #expect(job["results"]?[0]?["status"] == "ok", "\(job)")
        let held = stack.trello.cardValue(card)
        #expect(held?["desc"] == "Book early\n\nSpec: https://example.com/spec\nhttps://example.com/new", "\(String(describing: held?["desc"]))")
        #expect(attachmentIDs(held) == [scan], "the replaced link is gone, no link was attached, the upload stays")

        // Every app is told the card as it is now: the links in the notes, no URL, the upload.
        let told = try await CardRoundTripTests().pull(s, into: &view)
        #expect(told.count == 1, "\(told)")
        #expect(view["notes"] == held?["desc"])
        #expect(view["url"] == .null)
        #expect((view["attachments"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue } == [scan])
        // The webhooks of those writes are our echo: nothing more reaches the apps.
        #expect(try await CardRoundTripTests().pull(s, into: &view).isEmpty)

        // Notes cleared ("") with a link added in the same edit: the link alone, not appended to the notes cleared.
        let cleared = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)", fields: ["notes": "", "attachments": .array([.object(["url": "https://example.com/map"])])],
                changed: ["notes", "attachments"])
        ])
        #expect(cleared["results"]?[0]?["status"] == "ok", "\(cleared)")
        #expect(stack.trello.cardValue(card)?["desc"] == "https://example.com/map", "\(String(describing: stack.trello.cardValue(card)?["desc"]))")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func migratingAListMovesEveryLinkOnceAndASecondRunWritesNothing(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lmig", board: "Bmig")
        let trello = stack.trello
        let a = trello.userCreateCard(listID: "Lmig", name: "Read", desc: "Two articles")
        trello.userAddAttachment(cardID: a, url: "https://example.com/one", name: "One")
        trello.userAddAttachment(cardID: a, url: "https://example.com/two", name: "https://example.com/two")
        let pdf = trello.userAddAttachment(cardID: a, url: "https://trello.com/x/a.pdf", name: "a.pdf", upload: true, mimeType: "application/pdf")
        let b = trello.userCreateCard(listID: "Lmig", name: "No links", desc: "Nothing to move")
        // Half done by a run that died: the description holds the link, the attachment is still there.
        let c = trello.userCreateCard(listID: "Lmig", name: "Half", desc: "Link: https://example.com/half")
        trello.userAddAttachment(cardID: c, url: "https://example.com/half", name: "Link")
        try await s.stack.quiet()
        try await s.ack(try await s.changes())

        let writesBefore = trello.writeRequests.count
        let job = try await migrate(s)
        #expect(job["status"] == "completed" && job["kind"] == "migrate_links", "\(job)")
        let results = job["results"]?.arrayValue ?? []
        #expect(Set(results.compactMap { $0["trello_card_id"]?.stringValue }) == [a, c] && results.count == 2, "\(results)")
        #expect(results.allSatisfy { $0["status"] == "ok" && $0["op"] == "update" }, "\(results)")
        let byCard = Dictionary(results.map { ($0["trello_card_id"]?.stringValue ?? "", $0["summary"] ?? .null) }, uniquingKeysWith: { x, _ in x })
        #expect(byCard[a] == .object(["links_moved": .number(2), "notes_written": true]))
        #expect(byCard[c] == .object(["links_moved": .number(1), "notes_written": false]))

        #expect(trello.cardValue(a)?["desc"] == "Two articles\n\nOne: https://example.com/one\nhttps://example.com/two")
        #expect(attachmentIDs(trello.cardValue(a)) == [pdf], "uploads stay")
        #expect(trello.cardValue(c)?["desc"] == "Link: https://example.com/half", "a link the description holds is not appended again")
        #expect(attachmentIDs(trello.cardValue(c)).isEmpty)
        #expect(trello.cardValue(b)?["desc"] == "Nothing to move")
        let writes = Array(trello.writeRequests.dropFirst(writesBefore))
        #expect(
            writes.filter { $0.hasPrefix("PUT /1/cards/\(a)") }.count == 1
                && writes.filter { $0.hasPrefix("DELETE /1/cards/\(a)/attachments") }.count == 2)
        #expect(writes.count == 4, "one description and three links: \(writes)")

        // The apps get each card's new notes and attachments as one ordinary update.
        try await s.stack.quiet()
        let changes = try await s.changes()
        #expect(changes.count == 2 && changes.allSatisfy { $0["change_type"] == "update" }, "\(changes)")
        let changeA = try #require(changes.first { $0["trello_card_id"]?.stringValue == a })
        #expect(changeA["fields"]?["notes"] == trello.cardValue(a)?["desc"])
        #expect(changeA["fields"]?["url"] == .null)
        #expect((changeA["fields"]?["attachments"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue } == [pdf])
        try await s.ack(changes)

        // Again: nothing to move, nothing written, nothing for the apps.
        let writesAfter = trello.writeRequests.count
        let again = try await migrate(s)
        #expect(again["status"] == "completed" && (again["results"]?.arrayValue ?? []).isEmpty, "\(again)")
        #expect(trello.writeRequests.count == writesAfter, "\(trello.writeRequests.dropFirst(writesAfter))")
        try await s.stack.quiet()
        #expect(try await s.changes().isEmpty)

        let unknown = try await stack.callAPI(.POST, "/dailyroundup/lists/no-such-list/migrate-links", token: s.token)
        #expect(unknown.status == .notFound && unknown.json["error"]?["code"] != nil, "\(unknown.body)")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aMigrationTakenOverFromAKilledWorkerMovesEveryLinkOnce(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend, extra: Self.takeover)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lres", board: "Bres")
        var cards: [String] = []
        for n in 1...8 {
            let card = stack.trello.userCreateCard(listID: "Lres", name: "Card \(n)", desc: "Note \(n)")
            stack.trello.userAddAttachment(cardID: card, url: "https://example.com/\(n)/a", name: "A")
            stack.trello.userAddAttachment(cardID: card, url: "https://example.com/\(n)/b", name: "B")
            cards.append(card)
        }
        try await s.stack.quiet()
        try await s.ack(try await s.changes())

        stack.trello.setRequestDelay(.milliseconds(300))
        let started = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/migrate-links", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        let id = try #require(started.json["job_id"]?.stringValue)
        let progressed = try await TestSupport.eventually(timeout: .seconds(60)) {
            let job = try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(id)", token: s.token).json
            return (job["processed"]?.numberValue ?? 0) >= 2
        }
        #expect(progressed)
        try await stack.startWorker(name: "w2", extra: Self.takeover)
        stack.workers[0].signal(SIGKILL)
        stack.trello.setRequestDelay(.milliseconds(50))
        let job = try await s.wait(job: id, timeout: .seconds(90))
        #expect(job["status"] == "completed", "taken over and finished, not given up: \(job)")
        let results = job["results"]?.arrayValue ?? []
        #expect(Set(results.compactMap { $0["trello_card_id"]?.stringValue }) == Set(cards), "\(results)")
        #expect(results.allSatisfy { $0["status"] == "ok" }, "\(results)")
        for (n, card) in cards.enumerated() {
            let held = stack.trello.cardValue(card)
            #expect(
                held?["desc"] == .string("Note \(n + 1)\n\nA: https://example.com/\(n + 1)/a\nB: https://example.com/\(n + 1)/b"),
                "every link once: \(String(describing: held?["desc"]))")
            #expect(attachmentIDs(held).isEmpty)
        }
        await stack.shutdown()
    }
}
