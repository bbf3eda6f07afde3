import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// All-day reminders: a due or start date without a time goes to Trello as noon of that day in the
/// account's time zone and comes back to the apps as the day while the card holds it; a time set in Trello makes it a
/// timed date; date-times with an offset are taken and normalised. Through the real processes and the fake Trello.
@Suite(.serialized) struct DayDatesTests {
    @Test func aDayIsNoonInTheZoneAndStaysADay() throws {
        let day = try #require(DayDate("2026-12-01"))
        #expect(day.description == "2026-12-01")
        #expect(Timestamp.string(day.instant(in: try #require(AccountTimeZone(rawValue: "Europe/Berlin")).zone)) == "2026-12-01T11:00:00.000Z")
        #expect(
            Timestamp.string(try #require(DayDate("2026-07-04")).instant(in: try #require(AccountTimeZone(rawValue: "America/Los_Angeles")).zone))
                == "2026-07-04T19:00:00.000Z")
        #expect(Timestamp.string(day.instant(in: AccountTimeZone.utc.zone)) == "2026-12-01T12:00:00.000Z")
        for bad in ["2026-02-30", "2026-13-01", "2026-1-01", "26-12-01", "2026-12-01T00:00:00Z", "", "2026/12/01"] {
            #expect(DayDate(bad) == nil, "\(bad)")
        }
        for bad in ["Mars/Olympus", "", "Europe/Berlin ", "local"] { #expect(AccountTimeZone(rawValue: bad) == nil, "\(bad)") }
    }

    func card(_ job: JSONValue) throws -> String {
        #expect(job["status"] == "completed", "\(job)")
        #expect(job["results"]?[0]?["status"] == "ok", "\(job)")
        return try #require(job["results"]?[0]?["trello_card_id"]?.stringValue)
    }

    /// The newest pending change of the card (acking everything).
    func newest(_ s: SyncSetup, card: String) async throws -> JSONValue? {
        let changes = try await s.changes()
        try await s.ack(changes)
        return changes.last { $0["trello_card_id"]?.stringValue == card }
    }

    @Test(arguments: StoreBackend.available) func anAllDayReminderStaysAllDayBothWaysInTheAccountsTimeZone(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Ldays", board: "Bdays", policy: "lww")

        // The account's time zone: UTC until set; an unknown name is refused, naming the field.
        #expect(try await stack.callAPI(.GET, "/dailyroundup/account", token: s.token).json["time_zone"] == "UTC")
        let mars = try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"time_zone":"Mars/Olympus"}"#)
        #expect(mars.status == .unprocessableEntity)
        #expect(mars.json["error"]?["message"]?.stringValue?.hasPrefix("time_zone") == true, "\(mars.body)")
        let berlin = try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"time_zone":"Europe/Berlin"}"#)
        #expect(berlin.status == .ok, "\(berlin.body)")
        #expect(berlin.json["time_zone"] == "Europe/Berlin")

        // An all-day reminder made on a phone in Berlin: noon there on Trello, no echo back.
        let dentist = try card(try await s.sync([s.change("create", reminder: "R-dentist", fields: ["title": "Dentist", "due_date": "2026-12-01"])]))
        #expect(stack.trello.cardValue(dentist)?["due"] == "2026-12-01T11:00:00.000Z")
        try await stack.quiet()
        // (The card's Trello link comes back, as for any new card; the date does not.)
        let told = try await s.changes()
        #expect(told.allSatisfy { $0["fields"]?["due_date"] == nil }, "the app's own all-day date came back: \(told)")
        try await s.ack(told)

        // Archived and brought back in Trello: the card comes back whole, its date still the day.
        stack.trello.userUpdateCard(id: dentist, ["closed": true])
        try await stack.quiet()
        stack.trello.userUpdateCard(id: dentist, ["closed": false])
        try await stack.quiet()
        let back = try #require(try await newest(s, card: dentist))
        #expect(back["change_type"] == "create", "\(back)")
        #expect(back["fields"]?["due_date"] == "2026-12-01", "\(back)")

        // A time set in Trello makes it a timed reminder.
        stack.trello.userUpdateCard(id: dentist, ["due": "2026-12-01T15:30:00.000Z"])
        try await stack.quiet()
        let timed = try #require(try await newest(s, card: dentist))
        #expect(timed["fields"]?["due_date"] == "2026-12-01T15:30:00.000Z", "\(timed)")

        // From the apps: a date-time with an offset is normalised; then all day again.
        let offset = try await s.sync([
            s.change("update", reminder: "R-dentist", fields: ["due_date": "2026-12-03T09:00:00+01:00"], changed: ["due_date"], card: dentist)
        ])
        _ = try card(offset)
        #expect(stack.trello.cardValue(dentist)?["due"] == "2026-12-03T08:00:00.000Z")
        _ = try card(
            try await s.sync([s.change("update", reminder: "R-dentist", fields: ["due_date": "2026-12-04"], changed: ["due_date"], card: dentist)]))
        #expect(stack.trello.cardValue(dentist)?["due"] == "2026-12-04T11:00:00.000Z")
        try await stack.quiet()
        #expect(try await s.changes().allSatisfy { $0["fields"]?["due_date"] == nil })
        // A Trello edit of another field leaves the date alone; a whole card sent again carries the day.
        stack.trello.userUpdateCard(id: dentist, ["name": "Dentist (Dr. Weiss)"])
        stack.trello.userUpdateCard(id: dentist, ["closed": true])
        try await stack.quiet()
        stack.trello.userUpdateCard(id: dentist, ["closed": false])
        try await stack.quiet()
        let renamed = try #require(try await newest(s, card: dentist))
        #expect(renamed["fields"]?["due_date"] == "2026-12-04" && renamed["fields"]?["title"] == "Dentist (Dr. Weiss)", "\(renamed)")

        // A second time zone, in summer: noon in Los Angeles is 19:00 UTC; start dates too.
        let la = try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"time_zone":"America/Los_Angeles"}"#)
        #expect(la.status == .ok, "\(la.body)")
        let fireworks = try card(
            try await s.sync([
                s.change("create", reminder: "R-fireworks", fields: ["title": "Fireworks", "due_date": "2026-07-04", "start_date": "2026-07-01"])
            ]))
        #expect(stack.trello.cardValue(fireworks)?["due"] == "2026-07-04T19:00:00.000Z")
        #expect(stack.trello.cardValue(fireworks)?["start"] == "2026-07-01T19:00:00.000Z")
        try await stack.quiet()
        stack.trello.userUpdateCard(id: fireworks, ["closed": true])
        try await stack.quiet()
        stack.trello.userUpdateCard(id: fireworks, ["closed": false])
        try await stack.quiet()
        let july = try #require(try await newest(s, card: fireworks))
        #expect(july["fields"]?["due_date"] == "2026-07-04" && july["fields"]?["start_date"] == "2026-07-01", "\(july)")

        // Not a date: the item fails alone, naming the field.
        let bad = try await s.sync([s.change("create", reminder: "R-bad", fields: ["title": "Bad", "due_date": "2026-02-30"])])
        #expect(bad["results"]?[0]?["status"] == "error" || bad["status"] == "failed", "\(bad)")
        await stack.shutdown()
    }

    /// The day is remembered with the write that puts it on the card, whatever else the item meets: a conflict on
    /// another field, a conflict on the date itself and its resolution; a delete naming a date revives nothing; a
    /// date Trello sets to another instant and back is timed, not the day again.
    @Test(arguments: StoreBackend.available) func theDayIsRememberedWithItsWriteThroughConflictsAndResolutions(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Ldayc", board: "Bdayc", policy: "manual")
        #expect(try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"time_zone":"Europe/Berlin"}"#).status == .ok)
        func archivedAndBack(_ card: String) async throws -> JSONValue? {
            stack.trello.userUpdateCard(id: card, ["closed": true])
            try await stack.quiet()
            stack.trello.userUpdateCard(id: card, ["closed": false])
            try await stack.quiet()
            return try await newest(s, card: card)
        }

        let card = try card(try await s.sync([s.change("create", reminder: "R-tax", fields: ["title": "Tax", "due_date": "2026-12-01"])]))
        try await stack.quiet()
        try await s.ack(try await s.changes())
        // Trello renames it (not yet applied by the apps); the app renames it and makes it all-day on the 5th in one
        // edit: the title is an open conflict, the date is written, and remembered as a day.
        stack.trello.userUpdateCard(id: card, ["name": "Tax (Trello)"])
        try await stack.quiet()
        let both = try await s.sync([
            s.change(
                "update", reminder: "R-tax", fields: ["title": "Tax (app)", "due_date": "2026-12-05"], changed: ["title", "due_date"], card: card)
        ])
        #expect(both["results"]?[0]?["status"] == "conflict", "\(both)")
        #expect(stack.trello.cardValue(card)?["due"] == "2026-12-05T11:00:00.000Z")
        try await stack.quiet()
        try await s.ack(try await s.changes())
        let back = try #require(try await archivedAndBack(card))
        #expect(back["fields"]?["due_date"] == "2026-12-05", "\(back)")

        // Trello sets a time (not yet applied by the apps); the app makes it all-day on the 6th: a conflict on the date,
        // shown with the app's day; resolved for the reminder, the card gets noon of the 6th and the apps the day.
        stack.trello.userUpdateCard(id: card, ["due": "2026-12-02T08:00:00.000Z"])
        try await stack.quiet()
        let dated = try await s.sync([s.change("update", reminder: "R-tax", fields: ["due_date": "2026-12-06"], changed: ["due_date"], card: card)])
        #expect(dated["results"]?[0]?["status"] == "conflict", "\(dated)")
        let conflicts = try await stack.callAPI(.GET, "/dailyroundup/conflicts", token: s.token).json["conflicts"]?.arrayValue ?? []
        let conflict = try #require(conflicts.first { $0["field"] == "due_date" && $0["status"] == "open" })
        #expect(conflict["reminders_value"] == "2026-12-06", "\(conflict)")
        let id = Int(conflict["id"]?.numberValue ?? 0)
        let resolved = try await stack.callAPI(.POST, "/dailyroundup/conflicts/\(id)/resolve", token: s.token, body: #"{"choice":"reminders"}"#)
        #expect(resolved.status == .ok, "\(resolved.body)")
        #expect(stack.trello.cardValue(card)?["due"] == "2026-12-06T11:00:00.000Z")
        try await stack.quiet()
        let told = try await s.changes()
        #expect(told.allSatisfy { $0["fields"]?["due_date"].map { $0 == "2026-12-06" } ?? true }, "\(told)")
        try await s.ack(told)
        let again = try #require(try await archivedAndBack(card))
        #expect(again["fields"]?["due_date"] == "2026-12-06", "\(again)")

        // Trello moves the date to another time and back to noon of the 6th: a timed date now, not the day again.
        stack.trello.userUpdateCard(id: card, ["due": "2026-12-06T15:00:00.000Z"])
        try await stack.quiet()
        stack.trello.userUpdateCard(id: card, ["due": "2026-12-06T11:00:00.000Z"])
        try await stack.quiet()
        let timed = try #require(try await newest(s, card: card))
        #expect(timed["fields"]?["due_date"] == "2026-12-06T11:00:00.000Z", "\(timed)")

        // A delete that names a date archives the card and revives nothing: brought back in Trello, the card reaches the
        // apps as a create (a reminder to make again), not as an update of a reminder they deleted.
        let deleted = try await s.sync([s.change("delete", reminder: "R-tax", fields: ["due_date": "2026-12-07"], changed: ["due_date"], card: card)])
        #expect(deleted["results"]?[0]?["status"] == "ok", "\(deleted)")
        #expect(stack.trello.cardValue(card)?["closed"] == true)
        try await stack.quiet()
        try await s.ack(try await s.changes())
        stack.trello.userUpdateCard(id: card, ["closed": false])
        try await stack.quiet()
        let revived = try #require(try await newest(s, card: card))
        #expect(revived["change_type"] == "create", "\(revived)")
        await stack.shutdown()
    }
}
