import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupJobs
import RoundupStore
import RoundupTesting
import Testing

/// A deterministic generator, so a failing seed can be replayed.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// An app as the server sees it: keeps reminders, posts its edits as sync jobs, pulls, applies and acks changes.
/// Simulated by hand rather than RoundupSync's engine: this suite checks the server's rules (one-way lists, random field
/// directions, every conflict policy, a list that takes no Trello card) against the value each side last wrote, which
/// needs every step of the app under the test's control. EngineConvergenceTests runs the engine apps ship.
// @unchecked: each app is driven by one task at a time, and handed over only when that task ends.
final class SimulatedApp: @unchecked Sendable {
    let s: SyncSetup
    let seed: UInt64
    var rng: SplitMix64
    var reminders: [String: [String: JSONValue]] = [:]
    var cardOf: [String: String] = [:]
    /// The last value each side wrote to a card's field (app side by card too, once the card is known).
    var lastTrello: [String: [String: JSONValue]] = [:]
    var lastApp: [String: [String: JSONValue]] = [:]
    var next = 0
    var log: [String] = []
    /// The list's settings, as the server was given them.
    let settings: SyncSettings
    /// Cards made in Trello's UI (a list that takes no Trello card never maps them).
    var trelloMade: Set<String> = []
    /// The person's devices (an iPhone and a Mac on one iCloud account, sharing `reminders`), each pulling with its
    /// `device_id`; none: one app pulling without it.
    var devices: [String] = []
    /// How many changes each device applied.
    var pulledBy: [String: Int] = [:]
    /// A second synced list of the board (some seeds): cards and reminders move between the two, both ways.
    var second: (syncListID: String, trelloList: String)?
    /// The sync list each reminder is in, as the app knows it.
    var listOf: [String: String] = [:]
    /// Moves made, by side.
    var moves = (trello: 0, app: 0)

    static let fields = [SyncField.title, SyncField.notes, SyncField.completed]
    /// What else both sides edit: labels, a check item, the location, the due reminder, the priority.
    static let rich = [SyncField.labels, SyncField.checklists, SyncField.location, SyncField.dueReminderMinutes, SyncField.priority]
    /// Every board's labels and Priority options (`prepare`).
    static let labels: [(id: String, name: String, color: String?)] = [
        ("lab-a", "Alpha", "red"), ("lab-b", "Beta", "green"), ("lab-c", "Gamma", nil),
    ]
    static let options: [(id: String, text: String)] = [("o-high", "High"), ("o-med", "Medium"), ("o-low", "Low")]
    static let priority = PriorityField(fieldID: "F-prio", ordered: options.map { PriorityField.Option(id: $0.id, text: $0.text) })

    /// Gives the seed's board its labels and Priority field.
    static func prepare(_ trello: FakeTrello, board: String) {
        trello.setBoardLabels(boardID: board, labels)
        trello.setPriorityField(boardID: board, fieldID: priority.fieldID, options: options)
    }

    static func labelValue(_ ids: [String]) -> JSONValue {
        .array(
            ids.compactMap { id in
                labels.first { $0.id == id }.map {
                    .object(["id": .string($0.id), "name": .string($0.name), "color": $0.color.map(JSONValue.string) ?? .null])
                }
            })
    }

    init(_ setup: SyncSetup, seed: UInt64, settings: SyncSettings = .default) {
        s = setup
        self.seed = seed
        self.settings = settings
        rng = SplitMix64(seed: seed)
    }

    /// Random settings for a seed, as the API takes them: most lists two-way with random field directions and
    /// policies, some one-way either way, some taking no Trello card.
    static func randomSettings(seed: UInt64) -> JSONValue? {
        var rng = SplitMix64(seed: seed &* 7919)
        let policies: [JSONValue] = [.null, "manual", "lww", "prefer_trello", "prefer_reminders"]
        func pick<T>(_ items: [T]) -> T { items[Int.random(in: 0..<items.count, using: &rng)] }
        switch seed % 6 {
        case 0:
            return nil
        case 1, 2:
            let notes: [JSONValue] = ["both", "trello_to_reminders", "reminders_to_trello"]
            var fields: [String: JSONValue] = [
                SyncField.title.rawValue: .object(["direction": "both", "conflict_policy": pick(policies)]),
                SyncField.notes.rawValue: .object(["direction": pick(notes), "conflict_policy": pick(policies)]),
                SyncField.completed.rawValue: .object(["direction": "both", "conflict_policy": pick(policies)]),
            ]
            for field in SyncField.all where fields[field] == nil { fields[field] = .object(["direction": "both"]) }
            return .object(["fields": .object(fields), "initial": seed % 6 == 2 ? "nothing" : "open_cards"])
        case 3:
            return .object(["direction": "trello_to_reminders"])
        default:
            return .object(["direction": "reminders_to_trello"])
        }
    }

    func value(for field: SyncField, step: Int, side: String) -> JSONValue {
        field == SyncField.completed ? .bool(Bool.random(using: &rng)) : .string("\(side)\(seed)-\(step)-\(field)")
    }

    func createReminder(step: Int) async throws {
        next += 1
        let id = "r\(seed)-\(next)"
        let fields: [String: JSONValue] = [
            "title": .string("Task \(seed)-\(next)"), "notes": "", "completed": false, "labels": .array(["Alpha"]),
            "checklists": .array([.object(["name": "Steps", "items": .array([.object(["name": "one"]), .object(["name": "two"])])])]),
        ]
        reminders[id] = fields
        reminders[id]?[SyncField.labels] = Self.labelValue(["lab-a"])
        reminders[id]?[SyncField.checklists] = .array([])  // its ids come back with the next pull
        let job = try await s.sync([s.change("create", reminder: id, fields: fields)])
        log.append("step \(step): app create \(id) → \(job["results"]?[0] ?? .null)")
        if !settings.direction.toTrello {
            // A list that takes nothing from the apps: the reminder stays on the device alone.
            if job["results"]?[0]?["status"] != "skipped" { Issue.record("seed \(seed): a one-way list made a card: \(job)") }
            return
        }
        guard let card = job["results"]?[0]?["trello_card_id"]?.stringValue, job["results"]?[0]?["status"] == "ok" else {
            Issue.record("seed \(seed): create of \(id) did not make a card: \(job)")
            return
        }
        cardOf[id] = card
        listOf[id] = s.listID
        for field in Self.fields { lastApp[card, default: [:]][field] = fields[field] }
        lastApp[card, default: [:]][SyncField.labels] = Self.labelValue(["lab-a"])
    }

    func appEdit(step: Int) async throws {
        let mapped = cardOf.keys.sorted()
        guard !mapped.isEmpty else { return }
        let id = mapped[Int.random(in: 0..<mapped.count, using: &rng)]
        if Bool.random(using: &rng) { return try await appEditRich(id, step: step) }
        let field = Self.fields[Int.random(in: 0..<Self.fields.count, using: &rng)]
        let value = value(for: field, step: step, side: "a")
        reminders[id]?[field] = value
        lastApp[cardOf[id]!, default: [:]][field] = value
        let job = try await s.sync([change("update", reminder: id, fields: [field.rawValue: value], changed: [field.rawValue])])
        log.append("step \(step): app \(id).\(field) = \(value) → \(job["results"]?[0]?["status"] ?? .null)")
        let status = job["results"]?[0]?["status"]?.stringValue
        let expected: Set<String> = settings.syncsToTrello(field) ? ["ok", "conflict"] : ["skipped"]
        if !expected.contains(status ?? "") { Issue.record("seed \(seed): update of \(field) answered \(job)") }
    }

    /// An edit of a rich field: what the app sends, and what it then holds (as the server will tell it back).
    func appEditRich(_ id: String, step: Int) async throws {
        guard let card = cardOf[id] else { return }
        let field = Self.rich[Int.random(in: 0..<Self.rich.count, using: &rng)]
        var sent: JSONValue
        var held: [String: JSONValue] = [:]
        switch field {
        case SyncField.labels:
            let ids = Self.labels.map(\.id).filter { _ in Bool.random(using: &rng) }
            // By name, as a person picks them; the apps get ids and colours back.
            sent = .array(ids.map { id in .string(Self.labels.first { $0.id == id }!.name) })
            held[field] = Self.labelValue(ids)
        case SyncField.checklists:
            // Tick or untick an item the app knows (it learns the ids from the server).
            let lists = reminders[id]?[SyncField.checklists]?.arrayValue ?? []
            guard let list = lists.first, let listID = list["id"]?.stringValue, let items = list["items"]?.arrayValue, !items.isEmpty else { return }
            let item = items[Int.random(in: 0..<items.count, using: &rng)]
            let done = !(item["completed"]?.boolValue ?? false)
            sent = .array([.object(["id": .string(listID), "items": .array([.object(["id": item["id"]!, "completed": .bool(done)])])])])
            var checklists = Checklists(.array(lists))
            checklists.apply(.updateItem(checklistID: listID, itemID: item["id"]!.stringValue!, name: nil, completed: done))
            held[field] = checklists.value
        case SyncField.location:
            sent =
                Bool.random(using: &rng)
                ? .object([
                    "name": .string("a\(seed)-\(step)-place"), "address": "1 App St", "latitude": .number(Double(step)),
                    "longitude": .number(Double(seed % 90)),
                ]) : .null
            held[field] = sent
        case SyncField.dueReminderMinutes:
            sent = [JSONValue.null, .number(5), .number(15), .number(60)][Int.random(in: 0..<4, using: &rng)]
            held[field] = sent
        default:
            // The priority, by text or by level: the board's three options are levels 1, 5, 9.
            let pick = Int.random(in: 0..<4, using: &rng)
            let text: JSONValue = pick == 3 ? .null : .string(Self.options[pick].text.lowercased())
            if Bool.random(using: &rng) {
                sent = text
            } else {
                sent = .number([1, 5, 9, 0][pick])
            }
            held[SyncField.priority] = text
        }
        let sentField = field == SyncField.priority && sent.stringValue == nil && sent != .null ? SyncField.priorityLevel : field
        for (name, value) in held {
            reminders[id]?[name] = value
            lastApp[card, default: [:]][name] = value
        }
        let job = try await s.sync([change("update", reminder: id, fields: [sentField.rawValue: sent], changed: [sentField.rawValue])])
        log.append("step \(step): app \(id).\(sentField) = \(sent.canonicalJSON) → \(job["results"]?[0]?["status"] ?? .null)")
        let status = job["results"]?[0]?["status"]?.stringValue
        let expected: Set<String> = settings.syncsToTrello(sentField) ? ["ok", "conflict"] : ["skipped"]
        if !expected.contains(status ?? "") { Issue.record("seed \(seed): update of \(sentField) answered \(job)") }
    }

    /// A person's edit in Trello of a rich field.
    func trelloEditRich(_ card: String, step: Int) {
        let trello = s.stack.trello
        let field = Self.rich[Int.random(in: 0..<Self.rich.count, using: &rng)]
        switch field {
        case SyncField.labels:
            let label = Self.labels[Int.random(in: 0..<Self.labels.count, using: &rng)].id
            let on = !((trello.cardValue(card)?["idLabels"]?.arrayValue ?? []).contains(.string(label)))
            trello.userSetLabel(cardID: card, labelID: label, on: on)
        case SyncField.checklists:
            var lists = trello.cardValue(card)?["checklists"]?.arrayValue ?? []
            if lists.isEmpty {
                trello.userAddChecklist(cardID: card, name: "Trello steps", items: ["x", "y"])
                lists = trello.cardValue(card)?["checklists"]?.arrayValue ?? []
            }
            let items = lists.first?["checkItems"]?.arrayValue ?? []
            guard !items.isEmpty, let item = items[Int.random(in: 0..<items.count, using: &rng)]["id"]?.stringValue else { return }
            let done = items.first { $0["id"]?.stringValue == item }?["state"] != "complete"
            trello.userSetCheckItem(cardID: card, itemID: item, completed: done)
        case SyncField.location:
            if Bool.random(using: &rng) {
                trello.userUpdateCard(
                    id: card,
                    [
                        "locationName": .string("t\(seed)-\(step)-place"), "address": "2 Board Rd",
                        "coordinates": .string("\(step % 80).5,\(seed % 170).25"),
                    ])
            } else {
                trello.userUpdateCard(id: card, ["locationName": "", "address": "", "coordinates": ""])
            }
        case SyncField.dueReminderMinutes:
            trello.userUpdateCard(
                id: card, ["dueReminder": [JSONValue.number(-1), .number(10), .number(30), .number(1440)][Int.random(in: 0..<4, using: &rng)]])
        default:
            let pick = Int.random(in: 0..<4, using: &rng)
            trello.userSetPriority(cardID: card, fieldID: Self.priority.fieldID, optionID: pick == 3 ? nil : Self.options[pick].id)
        }
        if let now = trello.cardValue(card) {
            lastTrello[card, default: [:]][field] = CardMapper.fields(fromCard: now, priority: Self.priority)[field]
        }
        log.append("step \(step): trello \(card).\(field) = \(lastTrello[card]?[field]?.canonicalJSON ?? "?")")
    }

    func trelloEdit(step: Int) {
        let cards = s.stack.trello.openCards(inList: s.trelloList).compactMap { $0["id"]?.stringValue }
        guard !cards.isEmpty else { return }
        let card = cards[Int.random(in: 0..<cards.count, using: &rng)]
        if Bool.random(using: &rng) { return trelloEditRich(card, step: step) }
        let field = Self.fields[Int.random(in: 0..<Self.fields.count, using: &rng)]
        let value = value(for: field, step: step, side: "t")
        let attribute = SyncFields.cardAttribute[field]!
        s.stack.trello.userUpdateCard(id: card, [attribute: value])
        lastTrello[card, default: [:]][field] = value
        log.append("step \(step): trello \(card).\(field) = \(value)")
    }

    func trelloCreate(step: Int) {
        let card = s.stack.trello.userCreateCard(listID: s.trelloList, name: "Trello \(seed)-\(step)")
        trelloMade.insert(card)
        lastTrello[card, default: [:]][SyncField.title] = .string("Trello \(seed)-\(step)")
        log.append("step \(step): trello create \(card)")
    }

    /// A change of the reminder, naming the list the app has it in.
    func change(_ op: String, reminder id: String, fields: [String: JSONValue] = [:], changed: [String]? = nil) -> JSONValue {
        var change = s.change(op, reminder: id, fields: fields, changed: changed)
        if case .object(var object) = change, let list = listOf[id] {
            object["sync_list_id"] = .string(list)
            change = .object(object)
        }
        return change
    }

    /// Pairs a second list of the seed's board, syncing both ways.
    func addSecondList() async throws {
        let trelloList = "L\(seed)y"
        s.stack.trello.addList(id: trelloList, boardID: s.board)
        let body = #"{"name":"Later","trello_board_id":"\#(s.board)","trello_list_id":"\#(trelloList)"}"#
        let response = try await s.stack.callAPI(.POST, "/dailyroundup/lists", token: s.token, body: body)
        guard response.status == .created, let id = response.json["sync_list_id"]?.stringValue else { throw StackError("pair: \(response.body)") }
        second = (id, trelloList)
    }

    /// The other synced list of `syncListID` (the seed has two).
    func otherList(_ syncListID: String?) -> (syncListID: String, trelloList: String)? {
        guard let second else { return nil }
        return syncListID == second.syncListID ? (s.listID, s.trelloList) : second
    }

    /// A card dragged in Trello to the other synced list, or a reminder moved in the app to the other list.
    func move(step: Int) async throws {
        guard let second else { return }
        if Bool.random(using: &rng) {
            let cards = (s.stack.trello.openCards(inList: s.trelloList) + s.stack.trello.openCards(inList: second.trelloList))
                .compactMap { card in card["id"]?.stringValue.map { ($0, card["idList"]?.stringValue ?? "") } }
            guard !cards.isEmpty else { return }
            let (card, list) = cards[Int.random(in: 0..<cards.count, using: &rng)]
            let target = list == s.trelloList ? second.trelloList : s.trelloList
            s.stack.trello.userUpdateCard(id: card, ["idList": .string(target)])
            moves.trello += 1
            log.append("step \(step): trello move \(card) to \(target)")
            return
        }
        let mapped = cardOf.keys.sorted()
        guard !mapped.isEmpty else { return }
        let id = mapped[Int.random(in: 0..<mapped.count, using: &rng)]
        guard let target = otherList(listOf[id]) else { return }
        var move = s.change("move", reminder: id)
        if case .object(var object) = move {
            object["sync_list_id"] = .string(target.syncListID)
            move = .object(object)
        }
        let job = try await s.sync([move])
        log.append("step \(step): app move \(id) to \(target.syncListID) → \(job["results"]?[0] ?? .null)")
        guard job["results"]?[0]?["status"] == "ok" else {
            Issue.record("seed \(seed): move of \(id) answered \(job)")
            return
        }
        listOf[id] = target.syncListID
        moves.app += 1
    }

    /// Pulls every change, applies it, acks (with the reminder made for a create).
    /// Registers the person's two devices; from then on each pull is one device's, with its `device_id`.
    func useTwoDevices() async throws {
        for (device, platform) in [("phone-\(seed)", "ios"), ("mac-\(seed)", "macos")] {
            let body = JSONValue.object([
                "device_id": .string(device), "apns_token": .string(String(repeating: "ab", count: 32)), "platform": .string(platform),
                "environment": "sandbox",
            ])
            let response = try await s.stack.callAPI(.POST, "/dailyroundup/devices", token: s.token, body: body.canonicalJSON)
            guard response.status == .created || response.status == .ok else { throw StackError("device: \(response.body)") }
            devices.append(device)
        }
    }

    /// One pull: by `device` (a random one of `devices` when nil), or without a device when the person has none.
    func pull(device: String? = nil) async throws -> Int {
        let changes: [JSONValue]
        if devices.isEmpty {
            changes = try await s.changes()
        } else {
            let device = device ?? devices[Int.random(in: 0..<devices.count, using: &rng)]
            let response = try await s.stack.callAPI(.GET, "/dailyroundup/changes?limit=500&device_id=\(device)", token: s.token)
            guard response.status == .ok else { throw StackError("pull by \(device): \(response.body)") }
            changes = response.json["changes"]?.arrayValue ?? []
            pulledBy[device, default: 0] += changes.count
            if !changes.isEmpty { log.append("pull by \(device)") }
        }
        var made: [String: String] = [:]
        for change in changes {
            guard let card = change["trello_card_id"]?.stringValue else { continue }
            let known = change["reminder_id"]?.stringValue ?? cardOf.first { $0.value == card }?.key
            switch change["change_type"]?.stringValue {
            case "delete":
                if let known {
                    reminders[known] = nil
                    cardOf[known] = nil
                }
            default:
                var id = known
                if id == nil || reminders[id!] == nil {
                    next += 1
                    id = id ?? "t\(seed)-\(next)"
                    reminders[id!] = ["title": "", "notes": "", "completed": false]
                    cardOf[id!] = card
                    made[card] = id!
                }
                // A create or a move says which list the reminder is in.
                if change["change_type"] == "create" || change["change_type"] == "move", let list = change["sync_list_id"]?.stringValue {
                    listOf[id!] = list
                }
                for (field, value) in change["fields"]?.objectValue ?? [:] { reminders[id!]?[field] = value }
            }
            log.append(
                "pull: \(change["change_type"] ?? .null) \(card) \(change["fields"].map { f in Self.fields.map { "\($0)=\(f[$0.rawValue] ?? .null)" }.joined(separator: " ") } ?? "")"
            )
        }
        try await s.ack(changes, reminders: made)
        return changes.count
    }

    func play(steps: Int) async throws {
        try await createReminder(step: 0)
        trelloCreate(step: 0)
        for step in 1...steps {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0...3: trelloEdit(step: step)
            case 4...6: try await appEdit(step: step)
            case 7: try await createReminder(step: step)
            case 8 where second != nil: try await move(step: step)
            default: _ = try await pull()
            }
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...60, using: &rng)))
        }
    }

    /// Once both sides are quiet: every card is one reminder and every field agrees; each field holds the last
    /// value one of the sides wrote (which one, the policy decides) or its first value.
    ///
    /// With the list's settings: a field that flows one way only never carries the other side's value there (values
    /// are tagged `a` by the app, `t` by Trello); a list that takes no Trello card never maps one made in Trello; a
    /// list that takes nothing from the apps leaves their reminders on the device.
    func check() -> [String] {
        var problems: [String] = []
        let cards = s.stack.trello.openCards(inList: s.trelloList) + (second.map { s.stack.trello.openCards(inList: $0.trelloList) } ?? [])
        let cardIDs = Set(cards.compactMap { $0["id"]?.stringValue })
        let mapped = Array(cardOf.values)
        let takesTrelloCards = settings.direction.toReminders && settings.initial == .openCards
        let expectedMapped = takesTrelloCards ? cardIDs : cardIDs.subtracting(trelloMade)
        if Set(mapped) != expectedMapped { problems.append("cards \(expectedMapped.sorted()) but reminders map to \(mapped.sorted())") }
        if Set(mapped).count != mapped.count { problems.append("two reminders map to one card: \(cardOf)") }
        if settings.direction.toTrello, reminders.count != cardOf.count { problems.append("\(reminders.count) reminders, \(cardOf.count) mapped") }
        for card in cards {
            guard let id = card["id"]?.stringValue, let reminder = cardOf.first(where: { $0.value == id })?.key, let fields = reminders[reminder]
            else { continue }
            // Moved on either side: the reminder is in the list the card is in.
            if let second {
                let list = card["idList"]?.stringValue == second.trelloList ? second.syncListID : s.listID
                if listOf[reminder] != list { problems.append("\(id) is in \(list), its reminder \(reminder) in \(listOf[reminder] ?? "no list")") }
            }
            let trello = CardMapper.fields(fromCard: card, priority: Self.priority)
            for field in Self.rich where settings.direction(of: field) == .both {
                // Labels, checklists, location, due reminder and priority: equal on both sides, and each the last
                // value one side wrote (a check item's state is checked by the equality alone).
                if trello[field] != fields[field] ?? .null {
                    problems.append("\(id).\(field): Trello \(trello[field]?.canonicalJSON ?? "null"), app \(fields[field]?.canonicalJSON ?? "null")")
                }
                let candidates = [lastTrello[id]?[field], lastApp[id]?[field]].compactMap { $0 }
                if field != SyncField.checklists, !candidates.isEmpty, let final = trello[field], !candidates.contains(final) {
                    problems.append("\(id).\(field) = \(final.canonicalJSON), but the last edits were \(candidates.map(\.canonicalJSON))")
                }
            }
            for field in Self.fields {
                let direction = settings.direction(of: field)
                if direction == .both {
                    if trello[field] != fields[field] {
                        problems.append("\(id).\(field): Trello \(trello[field] ?? .null), app \(fields[field] ?? .null)")
                    }
                    let candidates = [lastTrello[id]?[field], lastApp[id]?[field]].compactMap { $0 }
                    if !candidates.isEmpty, let final = trello[field], !candidates.contains(final) {
                        problems.append("\(id).\(field) = \(final), but the last edits were \(candidates)")
                    }
                    continue
                }
                guard field != SyncField.completed else { continue }  // a flag carries no side's tag
                if direction?.toTrello != true, let value = trello[field]?.stringValue, value.hasPrefix("a\(seed)-") {
                    problems.append("\(id).\(field) flows to Reminders only, but Trello holds the app's \(value)")
                }
                if direction?.toReminders != true, let value = fields[field]?.stringValue, value.hasPrefix("t\(seed)-") {
                    problems.append("\(id).\(field) flows to Trello only, but the app holds Trello's \(value)")
                }
            }
        }
        return problems
    }
}

@Suite(.serialized) struct ConvergenceTests {
    /// Seeded random edits on both sides, hundreds of seeds (one account each) at once; afterwards every mapped
    /// field is equal on both sides, no card is duplicated, no edit is lost except as the policy says.
    @Test(arguments: StoreBackend.available) func bothSidesConvergeForEverySeed(backend: StoreBackend) async throws {
        // PostgreSQL's round trips make each seed slower: fewer of them there (ROUNDUP_CONVERGENCE_SEEDS sets both).
        let seeds = Int(ProcessInfo.processInfo.environment["ROUNDUP_CONVERGENCE_SEEDS"] ?? "") ?? (backend == .postgres ? 60 : 200)
        let steps = 8
        let extra = [
            "ROUNDUP_TRELLO_TOKEN_LIMIT": "100000", "ROUNDUP_TRELLO_KEY_LIMIT": "100000", "ROUNDUP_JOB_CONCURRENCY": "16", "LOG_LEVEL": "warning",
        ]
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress(extra: ["LOG_LEVEL": "warning"])
        try await stack.startWorker(name: "w1", extra: extra)
        try await stack.startWorker(name: "w2", extra: extra)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: extra.merging(["ROUNDUP_API_RATE_LIMIT": "100000"]) { $1 })
        let policies = ["manual", "lww", "prefer_trello", "prefer_reminders"]

        let apps: [SimulatedApp] = try await withThrowingTaskGroup(of: SimulatedApp.self) { group in
            var apps: [SimulatedApp] = []
            var started = 0
            func start() {
                let seed = UInt64(started + 1)
                started += 1
                group.addTask {
                    let policy = policies[Int(seed) % policies.count]
                    let listSettings = SimulatedApp.randomSettings(seed: seed)
                    SimulatedApp.prepare(stack.trello, board: "B\(seed)x")
                    let setup = try await SyncSetup.make(stack, list: "L\(seed)x", board: "B\(seed)x", policy: policy, listSettings: listSettings)
                    let app = SimulatedApp(setup, seed: seed, settings: try listSettings.map { try SyncSettings(json: $0) } ?? .default)
                    // Every other person has an iPhone and a Mac, pulling in turn with their device ids.
                    if seed % 2 == 0 { try await app.useTwoDevices() }
                    // Every sixth (two-way lists) has a second list, and moves cards and reminders between the two.
                    if seed % 6 == 0 { try await app.addSecondList() }
                    try await app.play(steps: steps)
                    return app
                }
            }
            for _ in 0..<min(24, seeds) { start() }
            while let app = try await group.next() {
                apps.append(app)
                if started < seeds { start() }
            }
            return apps
        }
        #expect(apps.count == seeds)

        // Both sides go quiet; the apps pull until nothing is left.
        try await stack.quiet()
        for app in apps {
            var rounds = 0
            // Each device in turn: a change one device holds is given to it again, never lost to the other.
            func drain() async throws -> Int {
                guard !app.devices.isEmpty else { return try await app.pull() }
                var pulled = 0
                for device in app.devices { pulled += try await app.pull(device: device) }
                return pulled
            }
            while try await drain() > 0, rounds < 5 { rounds += 1 }
        }
        try await stack.quiet()
        var failures: [String] = []
        for app in apps.sorted(by: { $0.seed < $1.seed }) {
            if try await app.pull() > 0 { app.log.append("late changes after quiet") }
            let problems = app.check()
            if !problems.isEmpty {
                // What the server decided for the account, newest first: which action made which change.
                let activity = try await stack.callAPI(.GET, "/dailyroundup/activity?limit=60", token: app.s.token).json["activity"]?.arrayValue ?? []
                app.log.append("activity, newest first:")
                for row in activity {
                    app.log.append(
                        "  \(row["created_at"] ?? .null) \(row["kind"] ?? .null) \(row["side"] ?? .null) \(row["trello_card_id"] ?? .null) \(row["sync_list_id"] ?? .null) \(row["field"] ?? .null) action \(row["trello_action_id"] ?? .null) \(row["message"] ?? .null)"
                    )
                }
                failures.append(
                    "seed \(app.seed) (\(policies[Int(app.seed) % policies.count]), settings \(app.settings.json.canonicalJSON)): \(problems.joined(separator: "; "))\n\(app.log.joined(separator: "\n"))"
                )
            }
        }
        let deliveryFailures = stack.trello.state.withLockedValue { $0.webhookFailures }
        for failure in failures.prefix(3) { Issue.record(Comment(rawValue: failure)) }
        #expect(
            failures.isEmpty, "\(failures.count) of \(seeds) seeds did not converge; fake Trello's failed webhook deliveries: \(deliveryFailures)")
        // The run exercised both sides, and the check can fail: a reminder edited behind the server's back is caught.
        let lines = apps.flatMap(\.log)
        let trelloEdits = lines.filter { $0.contains(": trello ") && !$0.contains("create") }.count
        let appEdits = lines.filter { $0.contains(": app r") }.count
        let conflicts = lines.filter { $0.hasSuffix("string(\"conflict\")") }.count
        let richEdits = lines.filter { line in (SimulatedApp.rich + [SyncField.priorityLevel]).contains { line.contains(".\($0) = ") } }.count
        #expect(trelloEdits > seeds && appEdits > seeds / 2, "trello edits \(trelloEdits), app edits \(appEdits)")
        #expect(richEdits > seeds / 2, "edits of labels, check items, location, due reminder and priority: \(richEdits)")
        // Both devices of the two-device people applied changes.
        let byDevice = apps.filter { !$0.devices.isEmpty }.reduce(into: [String: Int]()) { totals, app in
            for (device, count) in app.pulledBy { totals[device.hasPrefix("phone") ? "phone" : "mac", default: 0] += count }
        }
        #expect((byDevice["phone"] ?? 0) > 0 && (byDevice["mac"] ?? 0) > 0, "changes applied by device: \(byDevice)")
        // Cards and reminders moved, on both sides.
        let moves = apps.reduce(into: (trello: 0, app: 0)) {
            $0.trello += $1.moves.trello
            $0.app += $1.moves.app
        }
        #expect(moves.trello > 0 && moves.app > 0, "moves: \(moves)")
        print(
            "convergence: \(seeds) seeds, \(trelloEdits) Trello edits, \(appEdits) app edits (\(richEdits) of labels, check items, location, due reminder, priority), \(conflicts) manual conflicts, \(moves.trello) Trello moves, \(moves.app) app moves"
        )
        let twoWay = apps.sorted { $0.seed < $1.seed }.first { $0.settings.direction(of: SyncField.title) == .both && !$0.cardOf.isEmpty }
        #expect(twoWay != nil)
        if let app = twoWay, let reminder = app.cardOf.keys.sorted().first {
            app.reminders[reminder]?[SyncField.title] = "edited behind the server's back"
            #expect(!app.check().isEmpty)
        }
        await stack.shutdown()
    }

    /// The divergence this suite used to show in about half its runs (seeds 74 and 130 of 400, say), replayed in the
    /// store alone. A card made in Trello gets two quick title edits before the worker reads it for its create, so the
    /// read finds the newer title and dates it with the create's action. The newer edit's webhook then confirms that
    /// title at its own time, and that time must be kept: the older edit's webhook, delivered last (by the other
    /// worker), is older than it and must change nothing. When the confirmation was dropped (no field changed, so
    /// nothing was written), the stamp still held the create's time and the older title went to the apps.
    @Test(arguments: StoreBackend.available) func anOlderEditDeliveredLastDoesNotUndoTheNewerTitle(backend: StoreBackend) async throws {
        let f = try await StoreFixture(backend)
        let created = 1_700_000_000.0
        func observe(_ kind: CardObservation.Kind, at seconds: Double) async throws {
            _ = try await f.store.apply([
                CardObservation(
                    accountID: f.account, syncListID: f.list.id, cardID: "card-1", actionID: UUID().uuidString,
                    actionDate: Date(timeIntervalSince1970: seconds), kind: kind)
            ])
        }
        // The create, read from Trello after both edits: the newer title, dated with the create's action.
        try await observe(.fields(fullCard("newer"), full: true), at: created)
        // The newer edit's webhook (the title the store has already), then the older edit's, 58 ms older.
        try await observe(.fields([SyncField.title.rawValue: "newer"], full: false), at: created + 2.491)
        try await observe(.fields([SyncField.title.rawValue: "older"], full: false), at: created + 2.433)
        let changes = try await f.changes().filter { $0.trelloCardID == "card-1" }
        #expect(changes.count == 1)
        #expect(changes.last?.fields[SyncField.title] == "newer")
        // An edit newer than both still goes through.
        try await observe(.fields([SyncField.title.rawValue: "newest"], full: false), at: created + 3)
        #expect(try await f.changes().filter { $0.trelloCardID == "card-1" }.last?.fields[SyncField.title] == "newest")
    }
}
