import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// Links in the description instead of attachments: the list setting `move_links_to_notes` for what the
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

    // MARK: The migration and links-to-notes are exact

    /// The job's results by card.
    func results(_ job: JSONValue) -> [String: JSONValue] {
        Dictionary((job["results"]?.arrayValue ?? []).map { ($0["trello_card_id"]?.stringValue ?? "", $0) }, uniquingKeysWith: { x, _ in x })
    }

    /// A description naming `…/issue/123` does not hold the link `…/issue/12`, nor does a bare URL hold a named link: the
    /// link goes in with its name, in the migration and in the sync of a list that moves links to the notes.
    @Test(arguments: StoreBackend.available) func aURLInsideALongerOneIsNotTakenForItAndTheLinksNameStaysOnTheCard(backend: StoreBackend) async throws
    {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lexact", board: "Bexact", listSettings: .object(["move_links_to_notes": true]))
        let trello = stack.trello
        let crash = trello.userCreateCard(listID: "Lexact", name: "Crash on launch", desc: "Regression of https://x.example/issue/123")
        trello.userAddAttachment(cardID: crash, url: "https://x.example/issue/12", name: "Issue 12 - original crash report")
        let login = trello.userCreateCard(listID: "Lexact", name: "Login loop", desc: "See https://x.example/issue/7")
        trello.userAddAttachment(cardID: login, url: "https://x.example/issue/7", name: "Issue 7 - login loop")
        let followUp = trello.userCreateCard(listID: "Lexact", name: "Follow-up", desc: "After https://x.example/issue/123")
        var view: [String: JSONValue] = [:]
        _ = try await CardRoundTripTests().pull(s, into: &view)

        let job = try await migrate(s)
        #expect(job["status"] == "completed", "\(job)")
        let byCard = results(job)
        #expect(Set(byCard.keys) == [crash, login], "\(job)")
        for card in [crash, login] {
            #expect(
                byCard[card]?["status"] == "ok" && byCard[card]?["summary"] == .object(["links_moved": .number(1), "notes_written": true]), "\(job)")
        }
        #expect(
            trello.cardValue(crash)?["desc"]
                == "Regression of https://x.example/issue/123\n\nIssue 12 - original crash report: https://x.example/issue/12",
            "\(String(describing: trello.cardValue(crash)?["desc"]))")
        #expect(attachmentIDs(trello.cardValue(crash)).isEmpty)
        #expect(
            trello.cardValue(login)?["desc"] == "See https://x.example/issue/7\n\nIssue 7 - login loop: https://x.example/issue/7",
            "\(String(describing: trello.cardValue(login)?["desc"]))")
        #expect(attachmentIDs(trello.cardValue(login)).isEmpty)

        // The sync: a link the app adds to notes naming `…/issue/123` is written, with its name.
        let synced = try await s.sync([
            s.change(
                "update", reminder: "R-\(followUp)",
                fields: ["attachments": .array([.object(["url": "https://x.example/issue/12", "name": "Issue 12"])])], changed: ["attachments"])
        ])
        #expect(synced["results"]?[0]?["status"] == "ok", "\(synced)")
        #expect(
            trello.cardValue(followUp)?["desc"] == "After https://x.example/issue/123\n\nIssue 12: https://x.example/issue/12",
            "\(String(describing: trello.cardValue(followUp)?["desc"]))")
        await stack.shutdown()
    }

    /// A person edits a card in Trello after the job read its page and before the job writes that card: the links are
    /// appended to the person's text. And the job's own writes come back from Trello as its echo, never as a Trello edit:
    /// the one change of a card's notes to the migrated text is the job's, with no Trello action behind it.
    @Test(arguments: StoreBackend.available) func anEditInTrelloWhileTheJobRunsIsKeptAndTheJobsWritesAreItsOwn(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lfresh", board: "Bfresh")
        let trello = stack.trello
        let edited = trello.userCreateCard(listID: "Lfresh", name: "Edited meanwhile", desc: "Draft")
        trello.userAddAttachment(cardID: edited, url: "https://example.com/spec", name: "Spec")
        let untouched = trello.userCreateCard(listID: "Lfresh", name: "Untouched", desc: "Plan")
        for n in 1...3 { trello.userAddAttachment(cardID: untouched, url: "https://example.com/\(n)", name: "Part \(n)") }
        try await s.stack.quiet()
        try await s.ack(try await s.changes())

        // Newest first: the job turns to `untouched` before `edited`. Every card request takes 400 ms, so the webhooks of
        // `untouched`'s writes are handled while the job is still deleting its attachments.
        trello.setCardDelay(.milliseconds(400))
        // Requests for a card so far (the worker read the cards for their webhooks already).
        func requests(_ card: String) -> Int { trello.requestCount("GET /1/cards/\(card)") + trello.requestCount("PUT /1/cards/\(card)") }
        let before = (untouched: requests(untouched), edited: requests(edited))
        let started = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/migrate-links", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        let id = try #require(started.json["job_id"]?.stringValue)
        // The job has read the page and is at `untouched` (its first request for it, whatever it is): a person edits `edited`.
        let turned = await TestSupport.eventually(timeout: .seconds(30), interval: .milliseconds(5)) { requests(untouched) > before.untouched }
        #expect(turned)
        #expect(requests(edited) == before.edited, "the job has not reached `edited` yet")
        trello.userUpdateCard(id: edited, ["desc": "Draft, edited in Trello while the job ran"])
        let job = try await s.wait(job: id, timeout: .seconds(90))
        #expect(job["status"] == "completed", "\(job)")
        let byCard = results(job)
        #expect(byCard[edited]?["status"] == "ok" && byCard[untouched]?["status"] == "ok", "\(job)")
        trello.setCardDelay(.zero)

        let editedDesc = "Draft, edited in Trello while the job ran\n\nSpec: https://example.com/spec"
        let untouchedDesc = "Plan\n\nPart 1: https://example.com/1\nPart 2: https://example.com/2\nPart 3: https://example.com/3"
        #expect(trello.cardValue(edited)?["desc"] == .string(editedDesc), "the person's edit is kept")
        #expect(trello.cardValue(untouched)?["desc"] == .string(untouchedDesc))
        #expect(attachmentIDs(trello.cardValue(edited)).isEmpty && attachmentIDs(trello.cardValue(untouched)).isEmpty)

        // The apps end with what the cards hold.
        try await s.stack.quiet()
        var views: [String: [String: JSONValue]] = [:]
        for change in try await s.changes() {
            let card = change["trello_card_id"]?.stringValue ?? ""
            for (field, value) in change["fields"]?.objectValue ?? [:] { views[card, default: [:]][field] = value }
        }
        #expect(views[edited]?["notes"] == .string(editedDesc), "\(views)")
        #expect(views[untouched]?["notes"] == .string(untouchedDesc), "\(views)")
        #expect(views[untouched]?["url"] == .null && views[untouched]?["attachments"] == .array([]), "\(views)")

        // The history: the notes became the migrated text once, by the job (no Trello action); its webhooks were echo.
        for (card, desc) in [(edited, editedDesc), (untouched, untouchedDesc)] {
            let response = try await stack.callAPI(.GET, "/dailyroundup/activity?trello_card_id=\(card)&limit=200", token: s.token)
            #expect(response.status == .ok, "\(response.body)")
            let rows = response.json["activity"]?.arrayValue ?? []
            let migrated = rows.filter { $0["kind"] == "change" && $0["field"] == "notes" && $0["new_value"] == .string(desc) }
            #expect(migrated.count == 1 && migrated.first?["trello_action_id"] == .null, "\(rows)")
        }
        await stack.shutdown()
    }

    /// A description that would grow past Trello's 16,384 characters takes the links that fit; the others stay
    /// attachments and the card's result says why. A card whose description has no room writes nothing, and neither
    /// does a second run.
    @Test(arguments: StoreBackend.available) func linksThatWouldTakeTheDescriptionOverTrellosLimitStayAttached(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Llimit", board: "Blimit")
        let trello = stack.trello
        let long = String(repeating: "a", count: 16_384 - 40)
        let roomy = trello.userCreateCard(listID: "Llimit", name: "Long notes", desc: long)
        trello.userAddAttachment(cardID: roomy, url: "https://e.co/1", name: "One")
        let big = trello.userAddAttachment(cardID: roomy, url: "https://example.com/a-link-far-too-long-for-what-is-left", name: "Too long")
        trello.userAddAttachment(cardID: roomy, url: "https://e.co/3", name: "https://e.co/3")
        let fullText = String(repeating: "b", count: 16_384)
        let full = trello.userCreateCard(listID: "Llimit", name: "Full notes", desc: fullText)
        #expect(!full.isEmpty, "16,384 characters are Trello's limit, not over it")
        let stuck = trello.userAddAttachment(cardID: full, url: "https://e.co/4", name: "Four")
        try await s.stack.quiet()
        try await s.ack(try await s.changes())

        let writesBefore = trello.writeRequests.count
        let job = try await migrate(s)
        #expect(job["status"] == "completed", "\(job)")
        let byCard = results(job)
        #expect(byCard[roomy]?["status"] == "ok", "\(job)")
        #expect(byCard[roomy]?["summary"] == .object(["links_moved": .number(2), "notes_written": true, "links_kept": .number(1)]), "\(job)")
        #expect(byCard[roomy]?["reason"]?.stringValue?.contains("16384") == true, "\(job)")
        #expect(byCard[full]?["status"] == "skipped" && byCard[full]?["reason"]?.stringValue?.contains("16384") == true, "\(job)")
        #expect(trello.cardValue(roomy)?["desc"] == .string(long + "\n\nOne: https://e.co/1\nhttps://e.co/3"))
        #expect(attachmentIDs(trello.cardValue(roomy)) == [big], "the link that did not fit stays")
        #expect(trello.cardValue(full)?["desc"] == .string(fullText))
        #expect(attachmentIDs(trello.cardValue(full)) == [stuck])
        let writes = Array(trello.writeRequests.dropFirst(writesBefore))
        #expect(writes.count == 3 && writes.allSatisfy { $0.contains(roomy) }, "one description, two links: \(writes)")

        // The apps get the card as it is: the notes with the links that fit, the one left as its link.
        try await s.stack.quiet()
        let changes = try await s.changes()
        #expect(changes.count == 1, "\(changes)")
        #expect(changes.first?["fields"]?["notes"] == trello.cardValue(roomy)?["desc"])
        #expect(changes.first?["fields"]?["url"] == "https://example.com/a-link-far-too-long-for-what-is-left")
        try await s.ack(changes)

        // Again: still no room, nothing written, and the results say so.
        let again = try await migrate(s)
        #expect(again["status"] == "completed", "\(again)")
        let twice = results(again)
        #expect(Set(twice.keys) == [roomy, full] && twice.values.allSatisfy { $0["status"] == "skipped" }, "\(again)")
        #expect(trello.writeRequests.count == writesBefore + 3, "\(trello.writeRequests.dropFirst(writesBefore + 3))")
        await stack.shutdown()
    }

    /// On a list that moves links to the notes, an app's link that would take the description over Trello's limit fails
    /// its item, naming the limit, before any of it (the priority, the title) is written; the same edit without the link
    /// is written.
    @Test(arguments: StoreBackend.available) func aSyncThatWouldTakeTheDescriptionOverTrellosLimitFailsItsItemBeforeWritingAnything(
        backend: StoreBackend
    ) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        stack.trello.setPriorityField(boardID: "Bsynclimit", fieldID: "F1", options: [("o-low", "Low"), ("o-high", "High")])
        let s = try await SyncSetup.make(stack, list: "Lsynclimit", board: "Bsynclimit", listSettings: .object(["move_links_to_notes": true]))
        let trello = stack.trello
        let notes = String(repeating: "c", count: 16_370)
        let card = trello.userCreateCard(listID: "Lsynclimit", name: "Long notes", desc: notes)
        var view: [String: JSONValue] = [:]
        _ = try await CardRoundTripTests().pull(s, into: &view)

        let writesBefore = trello.writeRequests.count
        let link: JSONValue = .array([.object(["url": "https://example.com/spec", "name": "Spec"])])
        let job = try await s.sync([
            s.change(
                "update", reminder: "R-\(card)", fields: ["title": "Long notes, renamed", "priority": "high", "attachments": link],
                changed: ["title", "priority", "attachments"])
        ])
        let result = job["results"]?[0]
        #expect(result?["status"] == "error", "\(job)")
        let error = result?["error"]?.stringValue ?? ""
        #expect(error.contains("16384") && error.contains("move_links_to_notes"), "\(error)")
        #expect(trello.writeRequests.count == writesBefore, "nothing of the item reached Trello: \(trello.writeRequests.dropFirst(writesBefore))")
        #expect(trello.cardValue(card)?["name"] == "Long notes" && trello.cardValue(card)?["desc"] == .string(notes))
        let customFields: [JSONValue] = trello.cardValue(card)?["customFieldItems"]?.arrayValue ?? []
        #expect(customFields.isEmpty)

        let without = try await s.sync([
            s.change("update", reminder: "R-\(card)", fields: ["title": "Long notes, renamed", "priority": "high"], changed: ["title", "priority"])
        ])
        #expect(without["results"]?[0]?["status"] == "ok", "\(without)")
        #expect(trello.cardValue(card)?["name"] == "Long notes, renamed")
        await stack.shutdown()
    }
}
