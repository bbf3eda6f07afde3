import RoundupCore
import Testing

@testable import RoundupJobs
@testable import RoundupStore

/// The conflict policy (`FieldMerge`), table by table, without Trello or a database: an app's edit of one field meets
/// the card's value in Trello, the store's stamp of it and the change waiting for the apps.
@Suite struct FieldMergeTests {
    /// What one field's merge ends in.
    enum Outcome: Equatable {
        /// The app's value is written to Trello (`winning`: it also stands over the change waiting for the apps).
        case write(winning: Bool)
        /// Trello's value stays; the apps are sent it (`toApps`) or already have it waiting.
        case keepTrello(toApps: Bool)
        /// Both hold the same value already (`agreed`: the stamp is set to say so).
        case same(agreed: Bool)
    }

    struct Case: CustomTestStringConvertible {
        var name: String
        var field: SyncField = .title
        var app: JSONValue = "app"
        var trello: JSONValue = "trello"
        /// The stamp's value: what the store last saw in Trello (nil: no stamp).
        var stamped: JSONValue? = "trello"
        var stampTime: Double = 1_000
        /// The change waiting for the apps: its type and this field's value in it.
        var pending: (ChangeType, JSONValue, changed: Bool)? = nil
        var policy: ConflictPolicy = .lww
        var direction: SyncDirection = .both
        var appTime: Double = 2_000
        var cardTime: Double = 1_500
        var begun = false
        var told = false
        var expected: Outcome
        var rule: ConflictRule? = nil
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "Trello unchanged since the last sync: the app's value is written", expected: .write(winning: false)),
        Case(name: "no stamp and nothing waiting: the app's value is written", stamped: nil, expected: .write(winning: false)),
        Case(
            name: "both already agree: nothing written, the stamp catches up", app: "same", trello: "same", stamped: "old",
            expected: .same(agreed: true)),
        Case(name: "both agree and the stamp says so: nothing at all", app: "same", trello: "same", stamped: "same", expected: .same(agreed: false)),
        Case(
            name: "Trello changed, last writer wins, the app is newer", stamped: "older", stampTime: 1_000, expected: .write(winning: true),
            rule: .lww),
        Case(
            name: "Trello changed, last writer wins, Trello is newer", stamped: "trello", stampTime: 3_000, pending: (.update, "trello", true),
            expected: .keepTrello(toApps: false), rule: .lww),
        Case(
            name: "Trello changed, prefer Reminders", stamped: "older", policy: .preferReminders, expected: .write(winning: true),
            rule: .preferReminders),
        Case(
            name: "Trello changed, prefer Trello", stamped: "older", policy: .preferTrello, expected: .keepTrello(toApps: true), rule: .preferTrello),
        Case(
            name: "Trello changed, manual: Trello's value stands", stamped: "older", policy: .manual, expected: .keepTrello(toApps: true),
            rule: .manual),
        Case(
            name: "a change of the field waiting for the apps is a Trello edit", stamped: "trello", pending: (.update, "trello", true),
            policy: .preferTrello,
            expected: .keepTrello(toApps: false), rule: .preferTrello),
        Case(
            name: "completed within two seconds: done wins (the app's done)", field: .completed, app: .bool(true), trello: .bool(false),
            stamped: .bool(true),
            stampTime: 0, policy: .preferTrello, appTime: 2_000, cardTime: 2_001, expected: .write(winning: true), rule: .doneWins),
        Case(
            name: "completed within two seconds: done wins (Trello's done)", field: .completed, app: .bool(false), trello: .bool(true),
            stamped: .bool(false),
            policy: .preferReminders, appTime: 2_000, cardTime: 1_999, expected: .keepTrello(toApps: true), rule: .doneWins),
        Case(
            name: "a field that never reaches the apps keeps the app's value", stamped: "older", policy: .preferTrello, direction: .remindersToTrello,
            expected: .write(winning: true), rule: .oneWay),
        Case(
            name: "a field an earlier attempt began writing is ours, not Trello's edit", stamped: "older", policy: .preferTrello, begun: true,
            expected: .write(winning: false)),
        Case(
            name: "a move waiting for the apps carries the older value: the edit stands over it", stamped: "trello",
            pending: (.move, "trello", false),
            expected: .write(winning: true)),
        Case(
            name: "a move that changed the field is a Trello edit", stamped: "trello", pending: (.move, "moved", true), policy: .preferTrello,
            expected: .keepTrello(toApps: true), rule: .preferTrello),
        Case(
            name: "a delete waiting for the apps is no edit of the field", stamped: "trello", pending: (.delete, "gone", true),
            expected: .write(winning: false)),
        Case(
            name: "what our own write told the apps is no Trello edit; the new value is rewritten over it", stamped: "trello",
            pending: (.update, "trello", true), told: true, expected: .write(winning: true)),
    ]

    @Test(arguments: cases) func oneField(_ c: Case) throws {
        let plan = merge(c).plan()
        let name = c.field.rawValue
        switch c.expected {
        case .write(let winning):
            #expect(plan.write[name] == c.app)
            #expect((plan.winning[name] != nil) == winning)
            #expect(plan.toApps[name] == nil)
            #expect(plan.holds.contains(name))
        case .keepTrello(let toApps):
            #expect(plan.write[name] == nil)
            #expect(plan.winning[name] == nil)
            #expect(plan.toApps[name] == (toApps ? c.trello : nil))
            #expect(!plan.holds.contains(name))
        case .same(let agreed):
            #expect(plan.write.isEmpty && plan.toApps.isEmpty && plan.activity.isEmpty)
            #expect((plan.agreed[name] != nil) == agreed)
            #expect(plan.holds.contains(name))
        }
        let row = plan.activity.first
        if case .same = c.expected {
        } else {
            #expect(plan.activity.count == 1)
            #expect(row?.kind == (c.rule == nil ? .change : .conflict))
            #expect(row?.rule == c.rule)
            #expect(row?.field == name && row?.side == .reminders && row?.jobID == "job-1" && row?.syncListID == "list-1")
        }
        if let rule = c.rule {
            // The value set aside is `old`, the one that stands `new`.
            let appWins: Bool
            if case .write = c.expected { appWins = true } else { appWins = false }
            #expect(row?.kept == (appWins ? .reminders : .trello))
            #expect(row?.newValue == (appWins ? c.app : c.trello))
            #expect(row?.oldValue == (appWins ? c.trello : c.app))
            #expect((row?.message != nil) == (rule == .manual))
        }
        #expect(plan.conflicts.count == (c.rule == .manual ? 1 : 0))
    }

    @Test func aManualConflictShowsTheAppsAllDayDateAsItsDay() {
        var c = Case(
            name: "manual day", field: .dueDate, app: "2026-12-01T11:00:00.000Z", trello: "2026-12-02T09:00:00.000Z", stamped: "old",
            expected: .keepTrello(toApps: true))
        c.policy = .manual
        var merge = merge(c)
        merge.days = ["due_date": "2026-12-01"]
        let plan = merge.plan()
        #expect(plan.conflicts == [NewConflict(field: "due_date", trelloValue: "2026-12-02T09:00:00.000Z", remindersValue: "2026-12-01")])
    }

    @Test func fieldsAreMergedInNameOrderAndEachOnItsOwn() {
        var merge = merge(Case(name: "two", stamped: "older", policy: .preferTrello, expected: .keepTrello(toApps: true)))
        merge.changed = [.title, .notes]
        merge.app = ["title": "app title", "notes": "app notes"]
        merge.trello = ["title": "trello title", "notes": "app notes"]
        merge.stamps = ["title": FieldStamp(hash: JSONValue.string("older").fieldHash, time: 1_000)]
        let plan = merge.plan()
        #expect(plan.activity.map(\.field) == ["title"])
        #expect(plan.toApps == ["title": "trello title"])
        #expect(plan.agreed == ["notes": "app notes"])
        #expect(plan.holds == ["notes"])
    }

    func merge(_ c: Case) -> FieldMerge {
        var stamps: [String: FieldStamp] = [:]
        if let stamped = c.stamped { stamps[c.field.rawValue] = FieldStamp(hash: stamped.fieldHash, time: c.stampTime) }
        var pending: PendingChange?
        if let waiting = c.pending {
            let (type, value, changed) = waiting
            pending = PendingChange(
                id: 1, accountID: "a", syncListID: "list-1", changeType: type,
                changedFieldsJSON: JSONValue.array(changed ? [.string(c.field.rawValue)] : []).canonicalJSON,
                fieldsJSON: JSONValue.object([c.field.rawValue: value]).canonicalJSON, trelloCardID: "card-1", reminderID: "r-1",
                createdAt: "2026-12-07T00:00:00Z")
            if c.told { stamps[SyncWrite.toldStamp(c.field.rawValue)] = FieldStamp(hash: value.fieldHash, time: 0) }
        }
        var settings = SyncSettings()
        settings.fields[c.field] = FieldRule(direction: c.direction)
        return FieldMerge(
            changed: [c.field], app: [c.field.rawValue: c.app], trello: [c.field.rawValue: c.trello], stamps: stamps, pending: pending,
            begun: c.begun ? [c.field] : [], settings: settings, accountPolicy: c.policy, appTime: c.appTime, cardTime: c.cardTime,
            origin: .init(syncListID: "list-1", cardID: "card-1", reminderID: "r-1", jobID: "job-1"))
    }
}
