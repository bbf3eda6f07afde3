public import RoundupCore

/// A Trello webhook delivery as the ingress enqueues it on the webhook stream and the worker reads it.
///
/// The ingress appends it from a Lua script on its hot path (`IngressScripts.enqueue`) with these field names
/// (`Field`), in this order; everything else writes and reads it through this type.
public struct WebhookEvent: StreamMessage, Equatable {
    public enum Field: String, CaseIterable, Sendable {
        case account, action, type, model, received, body
        /// Set (`confirmed`) by the ingress on a delivery that did not come to the account's own callback URL
        /// (`WebhookCallback`): the worker reads every change it describes from Trello instead of trusting its payload.
        case confirm
        /// The W3C trace context of the ingress's enqueue (`TraceHeaders`), when tracing is on.
        case traceparent, tracestate
    }

    /// The value of `confirm` when set.
    public static let confirmed = "1"

    /// Every field an event may carry: what a dead letter's replay puts back on the stream.
    public static let fieldNames = Field.allCases.map(\.rawValue)

    public var account: String
    /// Trello's action id.
    public var actionID: String?
    /// Trello's action type (`updateCard`…).
    public var type: String?
    /// The id of the model (list or board) the webhook watches.
    public var model: String?
    /// When the ingress took it, in milliseconds since 1970.
    public var receivedMilliseconds: Int?
    /// The delivery's JSON body as it came.
    public var body: [UInt8]
    /// Every change it describes must be read from Trello, its payload not trusted.
    public var confirm: Bool
    /// Where it was enqueued in a trace (tracing on): the worker's batch links to it.
    public var trace: TraceHeaders?

    public init(
        account: String, actionID: String?, type: String?, model: String?, receivedMilliseconds: Int?, body: [UInt8], confirm: Bool = false,
        trace: TraceHeaders? = nil
    ) {
        self.account = account
        self.actionID = actionID
        self.type = type
        self.model = model
        self.receivedMilliseconds = receivedMilliseconds
        self.body = body
        self.confirm = confirm
        self.trace = trace
    }

    public init?(fields: [String: [UInt8]]) {
        guard let account = fields.text(Field.account), let body = fields[Field.body.rawValue] else { return nil }
        self.init(
            account: account, actionID: fields.text(Field.action), type: fields.text(Field.type), model: fields.text(Field.model),
            receivedMilliseconds: fields.text(Field.received).flatMap { Double($0) }.map { Int($0) }, body: body,
            confirm: fields.text(Field.confirm) == Self.confirmed, trace: TraceHeaders(fields: fields))
    }

    public var fields: [(name: String, value: [UInt8])] {
        var fields: [(name: String, value: [UInt8])] = []
        fields.append(Field.account, account)
        if let actionID { fields.append(Field.action, actionID) }
        if let type { fields.append(Field.type, type) }
        if let model { fields.append(Field.model, model) }
        if let receivedMilliseconds { fields.append(Field.received, String(receivedMilliseconds)) }
        fields.append((Field.body.rawValue, body))
        if confirm { fields.append(Field.confirm, Self.confirmed) }
        trace?.append(to: &fields)
        return fields
    }

    public static func == (a: WebhookEvent, b: WebhookEvent) -> Bool {
        a.account == b.account && a.actionID == b.actionID && a.type == b.type && a.model == b.model
            && a.receivedMilliseconds == b.receivedMilliseconds && a.body == b.body && a.confirm == b.confirm && a.trace == b.trace
    }
}
