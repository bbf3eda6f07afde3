public import Foundation

/// Which way a list, or one field of it, syncs.
public enum SyncDirection: String, Sendable, Hashable, CaseIterable, Codable {
    case both
    case trelloToReminders = "trello_to_reminders"
    case remindersToTrello = "reminders_to_trello"

    /// Trello's side reaches the apps.
    public var toReminders: Bool { self != .remindersToTrello }
    /// The apps' side reaches Trello.
    public var toTrello: Bool { self != .trelloToReminders }

    /// The direction both allow, or nil when they allow nothing in common.
    public func intersection(_ other: SyncDirection) -> SyncDirection? {
        switch (toReminders && other.toReminders, toTrello && other.toTrello) {
        case (true, true): .both
        case (true, false): .trelloToReminders
        case (false, true): .remindersToTrello
        case (false, false): nil
        }
    }
}

/// Which of a Trello list's cards a new pairing takes (`initial` of a list's settings).
public enum InitialMode: String, Sendable, Hashable, CaseIterable, Codable {
    /// Every open card of the list becomes a reminder (by an import, or the first reconciliation).
    case openCards = "open_cards"
    /// Only cards created in Trello after the pairing become reminders.
    case newCards = "new_cards"
    /// No Trello card becomes a reminder: only cards made from reminders sync ("create one way, update both ways").
    case nothing
}

/// One field's rule: the way it flows, and who wins a conflict on it (nil: the account's policy).
public struct FieldRule: Sendable, Hashable {
    public var direction: SyncDirection
    public var conflictPolicy: ConflictPolicy?

    public init(direction: SyncDirection = .both, conflictPolicy: ConflictPolicy? = nil) {
        self.direction = direction
        self.conflictPolicy = conflictPolicy
    }
}

/// What a card is, as far as a list's filter asks: its labels, its members, whether it is marked complete.
public struct CardFacts: Sendable, Hashable {
    public var labels: Set<String>
    public var members: Set<String>
    public var complete: Bool

    public init(labels: Set<String> = [], members: Set<String> = [], complete: Bool = false) {
        self.labels = labels
        self.members = members
        self.complete = complete
    }

    /// From a full Trello card (`idLabels`, `idMembers`, `dueComplete`).
    public init(card: [String: JSONValue]) {
        labels = Set((card["idLabels"]?.arrayValue ?? []).compactMap(\.stringValue))
        members = Set((card["idMembers"]?.arrayValue ?? []).compactMap(\.stringValue))
        complete = card["dueComplete"]?.boolValue ?? false
    }
}

/// Which cards of a list sync. Empty label and member sets ask nothing of them; a card that stops matching leaves
/// the apps (a delete) and one that starts matching comes to them (a create).
public struct CardFilter: Sendable, Hashable {
    /// The card carries at least one of these labels (Trello label ids).
    public var labels: Set<String>
    /// At least one of these members is on the card (Trello member ids; the API turns `me` into the token's member).
    public var members: Set<String>
    /// Only cards not marked complete in Trello.
    public var openOnly: Bool

    public init(labels: Set<String> = [], members: Set<String> = [], openOnly: Bool = false) {
        self.labels = labels
        self.members = members
        self.openOnly = openOnly
    }

    /// Nothing is filtered out.
    public var isEmpty: Bool { labels.isEmpty && members.isEmpty && !openOnly }

    public func admits(_ card: CardFacts) -> Bool {
        if openOnly && card.complete { return false }
        if !labels.isEmpty && labels.isDisjoint(with: card.labels) { return false }
        if !members.isEmpty && members.isDisjoint(with: card.members) { return false }
        return true
    }
}

/// A list's sync settings (`settings` of `/dailyroundup/lists`): the way it syncs, the fields that sync and each
/// one's way and conflict policy, which cards sync, and what a new pairing takes. The defaults are how every list
/// synced before settings existed: every field both ways, every open card.
public struct SyncSettings: Sendable, Hashable {
    public var direction: SyncDirection
    /// The fields that sync (the others are never sent to the apps nor written to Trello), each with its rule.
    public var fields: [SyncField: FieldRule]
    public var filter: CardFilter
    public var initial: InitialMode
    /// Links the apps send (`url`, new `attachments`) are appended to the card's description instead of becoming link
    /// attachments (`POST /dailyroundup/lists/{id}/migrate-links` moves the links a list's cards hold already).
    public var moveLinksToNotes: Bool

    public init(
        direction: SyncDirection = .both, fields: [SyncField: FieldRule] = SyncSettings.allFields, filter: CardFilter = CardFilter(),
        initial: InitialMode = .openCards, moveLinksToNotes: Bool = false
    ) {
        self.direction = direction
        self.fields = fields
        self.filter = filter
        self.initial = initial
        self.moveLinksToNotes = moveLinksToNotes
    }

    public static let `default` = SyncSettings()
    public static let allFields = Dictionary(uniqueKeysWithValues: SyncField.all.map { ($0, FieldRule()) })
    /// Fields only Trello holds: the apps cannot write them, so they flow from Trello only.
    public static let trelloOnlyFields: Set<SyncField> = [.trelloURL]

    /// The way `field` flows: its own direction within the list's, or nil when it does not sync.
    public func direction(of field: SyncField) -> SyncDirection? {
        guard let rule = fields[field] else { return nil }
        var direction = rule.direction.intersection(self.direction)
        if Self.trelloOnlyFields.contains(field) { direction = direction?.intersection(.trelloToReminders) }
        return direction
    }

    /// Trello's value of `field` reaches the apps.
    public func syncsToReminders(_ field: SyncField) -> Bool { direction(of: field)?.toReminders ?? false }
    /// Trello's value of the field of this wire name reaches the apps (a name that is no field never does).
    public func syncsToReminders(named name: String) -> Bool { SyncField(rawValue: name).map(syncsToReminders) ?? false }
    /// The apps' value of `field` is written to Trello.
    public func syncsToTrello(_ field: SyncField) -> Bool { direction(of: field)?.toTrello ?? false }

    /// The apps' value of the field of this wire name is written to Trello (a name that is no field never is).
    public func syncsToTrello(named name: String) -> Bool { SyncField(rawValue: name).map(syncsToTrello) ?? false }

    /// Who wins a conflict on `field`: the field's own policy, else the account's.
    public func conflictPolicy(of field: SyncField, account: ConflictPolicy) -> ConflictPolicy {
        fields[field]?.conflictPolicy ?? account
    }

    /// Whether a card first seen in the list may become a reminder: `mapped` when a reminder already owns it (a card
    /// made from one, moved out and back), `cardID` for its creation time (the first four bytes of a Trello id).
    public func admitsNewCard(cardID: String, mapped: Bool, pairedAt: Date?) -> Bool {
        guard direction.toReminders else { return false }
        if mapped { return true }
        switch initial {
        case .openCards: return true
        case .nothing: return false
        case .newCards:
            guard let pairedAt, let created = TrelloID.creationDate(cardID) else { return false }
            // Trello's clock and ours: a card made in the second of the pairing counts as new.
            return created.timeIntervalSince1970 >= pairedAt.timeIntervalSince1970.rounded(.down)
        }
    }
}

/// Trello's ids are MongoDB object ids: 24 hex digits whose first eight are the creation time in seconds.
public enum TrelloID {
    public static func creationDate(_ id: String) -> Date? {
        let utf8 = Array(id.utf8)
        guard utf8.count == 24, utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }),
            let seconds = UInt32(String(decoding: utf8[0..<8], as: UTF8.self), radix: 16)
        else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }
}

// MARK: JSON

extension SyncSettings {
    /// The settings as the API shows them and the store keeps them (canonical JSON, every key present).
    public var json: JSONValue {
        var fieldObjects: [String: JSONValue] = [:]
        for (field, rule) in fields {
            fieldObjects[field.rawValue] = .object([
                "direction": .string(rule.direction.rawValue),
                "conflict_policy": rule.conflictPolicy.map { .string($0.rawValue) } ?? .null,
            ])
        }
        return .object([
            "direction": .string(direction.rawValue),
            "fields": .object(fieldObjects),
            "filter": .object([
                "labels": .array(filter.labels.sorted().map(JSONValue.string)),
                "members": .array(filter.members.sorted().map(JSONValue.string)),
                "open_only": .bool(filter.openOnly),
            ]),
            "initial": .string(initial.rawValue),
            "move_links_to_notes": .bool(moveLinksToNotes),
        ])
    }

    /// Why a settings document was refused, naming the part at fault.
    public struct Invalid: Error, Sendable, CustomStringConvertible, Equatable {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// Settings from a request's `settings` object, over `base` (a key left out keeps its value there). Each mistake is
    /// refused with what is wrong; `me` among the filter's members is kept for the caller to resolve.
    public init(json: JSONValue, over base: SyncSettings = .default) throws(Invalid) {
        guard case .object(let object) = json else { throw Invalid("settings must be an object") }
        let known: Set<String> = ["direction", "fields", "filter", "initial", "move_links_to_notes"]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw Invalid("settings.\(unknown) is not a setting; allowed: direction, fields, filter, initial, move_links_to_notes")
        }
        self = base
        if let value = object["direction"] { direction = try Self.enumValue(value, path: "settings.direction") }
        if let value = object["initial"] { initial = try Self.enumValue(value, path: "settings.initial") }
        if let value = object["move_links_to_notes"] {
            guard case .bool(let flag) = value else { throw Invalid("settings.move_links_to_notes must be true or false") }
            moveLinksToNotes = flag
        }
        if let value = object["fields"] {
            guard case .object(let entries) = value else {
                throw Invalid("settings.fields must be an object of field name → {direction, conflict_policy}")
            }
            var rules: [SyncField: FieldRule] = [:]
            for (name, entry) in entries {
                let path = "settings.fields.\(name)"
                guard let field = SyncField(rawValue: name) else {
                    throw Invalid("\(path): unknown field; allowed: \(SyncField.names.joined(separator: ", "))")
                }
                guard case .object(let ruleObject) = entry else { throw Invalid("\(path) must be an object with direction and conflict_policy") }
                if let unknown = ruleObject.keys.sorted().first(where: { $0 != "direction" && $0 != "conflict_policy" }) {
                    throw Invalid("\(path).\(unknown) is not a field setting; allowed: direction, conflict_policy")
                }
                var rule = FieldRule()
                if let value = ruleObject["direction"] { rule.direction = try Self.enumValue(value, path: "\(path).direction") }
                if let value = ruleObject["conflict_policy"], value != .null {
                    rule.conflictPolicy = try Self.enumValue(value, path: "\(path).conflict_policy") as ConflictPolicy
                }
                rules[field] = rule
            }
            fields = rules
        }
        if let value = object["filter"] {
            guard case .object(let filterObject) = value else { throw Invalid("settings.filter must be an object with labels, members, open_only") }
            let allowed: Set<String> = ["labels", "members", "open_only"]
            if let unknown = filterObject.keys.sorted().first(where: { !allowed.contains($0) }) {
                throw Invalid("settings.filter.\(unknown) is not a filter; allowed: labels, members, open_only")
            }
            if let value = filterObject["labels"] { filter.labels = try Self.ids(value, path: "settings.filter.labels", allowMe: false) }
            if let value = filterObject["members"] { filter.members = try Self.ids(value, path: "settings.filter.members", allowMe: true) }
            if let value = filterObject["open_only"] {
                guard case .bool(let flag) = value else { throw Invalid("settings.filter.open_only must be true or false") }
                filter.openOnly = flag
            }
        }
        try validate()
    }

    /// The rules no document may break: the title syncs every way the list does (a reminder and a card both need one), a field's own
    /// direction has something in common with the list's, and a field only Trello holds never flows to Trello.
    public func validate() throws(Invalid) {
        guard let title = fields[.title] else { throw Invalid("settings.fields must include title: a reminder and a card both need one") }
        // A create carries the title: it goes every way the list creates reminders or cards.
        if title.direction.intersection(direction) != direction {
            throw Invalid(
                "settings.fields.title.direction must include the list's direction \(direction.rawValue): every new reminder or card needs its title")
        }
        for name in fields.keys.sorted() {
            guard let rule = fields[name] else { continue }
            if rule.direction.intersection(direction) == nil {
                throw Invalid("settings.fields.\(name).direction \(rule.direction.rawValue) is outside the list's direction \(direction.rawValue)")
            }
            if Self.trelloOnlyFields.contains(name), rule.direction == .remindersToTrello {
                throw Invalid("settings.fields.\(name) can only flow from Trello to Reminders: the apps cannot write it")
            }
        }
    }

    /// What the store keeps: nil for the defaults (read back without parsing), else the canonical JSON with the
    /// version of the field list it was written with (`storedFieldsVersion`).
    public var storedText: String? {
        guard self != .default, case .object(var object) = json else { return nil }
        object[Self.fieldsVersionKey] = .number(Double(Self.storedFieldsVersion))
        return JSONValue.object(object).canonicalJSON
    }

    /// The field list's version in stored settings (text without it is of version 1): the last `fieldsAdded` version.
    static let storedFieldsVersion = 3
    static let fieldsVersionKey = "fields_version"

    /// Fields added after settings were first stored: a field map stored before `version` was written when the field
    /// did not exist, so it does not name it; it gets the rule of `like` (the field it is another form of), else the
    /// default rule (and a field whose `like` the map leaves out is left out too). A map of that version or later that leaves one out means it.
    public static let fieldsAdded: [(version: Int, field: SyncField, like: SyncField?)] = [
        (2, .attachments, nil), (2, .trelloURL, nil), (2, .dueReminderMinutes, nil), (3, .priorityLevel, .priority),
    ]

    /// Every field of `fieldsAdded`.
    public static var fieldsAddedLater: [SyncField] { fieldsAdded.map(\.field) }

    /// Settings as stored: nil or damaged text is the defaults (the API checked them when it stored them).
    public init(stored text: String?) {
        guard let text, case .object(var object)? = try? JSONParser.parse(Array(text.utf8)) else {
            self = .default
            return
        }
        var version = 1
        if case .number(let stored)? = object.removeValue(forKey: Self.fieldsVersionKey) { version = Int(stored) }
        guard var settings = try? SyncSettings(json: .object(object)) else {
            self = .default
            return
        }
        if object["fields"] != nil {
            for added in Self.fieldsAdded where version < added.version && settings.fields[added.field] == nil {
                // Another form of a field the map leaves out is left out with it.
                if let like = added.like {
                    if let rule = settings.fields[like] { settings.fields[added.field] = rule }
                } else {
                    settings.fields[added.field] = FieldRule()
                }
            }
        }
        self = settings
    }

    private static func enumValue<T: RawRepresentable & CaseIterable>(_ value: JSONValue, path: String) throws(Invalid) -> T
    where T.RawValue == String {
        guard case .string(let text) = value, let parsed = T(rawValue: text) else {
            throw Invalid("\(path) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return parsed
    }

    private static func ids(_ value: JSONValue, path: String, allowMe: Bool) throws(Invalid) -> Set<String> {
        guard case .array(let items) = value, items.count <= 50 else { throw Invalid("\(path) must be an array of at most 50 Trello ids") }
        var ids = Set<String>()
        for item in items {
            guard case .string(let id) = item,
                (allowMe && id == "me") || (!id.isEmpty && id.count <= 64 && id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) }))
            else {
                throw Invalid("\(path) must hold Trello ids (letters and digits)\(allowMe ? " or \"me\"" : "")")
            }
            ids.insert(id)
        }
        return ids
    }
}
