import * as grpc from "@grpc/grpc-js";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import type { GenMessage } from "@bufbuild/protobuf/codegenv2";
import { fromServiceError, HarbingerError, Status } from "./errors.js";

/** A method of the contract: its path and its request and answer schemas. */
export interface Method<I extends DescMessage, O extends DescMessage> {
  path: string;
  input: I;
  output: O;
}

export function method<I extends DescMessage, O extends DescMessage>(
  service: string,
  name: string,
  input: I,
  output: O,
): Method<I, O> {
  return { path: `/harbinger.v1.${service}/${name}`, input, output };
}

/** A request as a message, or already encoded (a Producer's batches). */
export type Wire<I extends DescMessage> = MessageShape<I> | Uint8Array;

function serializer<I extends DescMessage>(schema: I): (v: Wire<I>) => Buffer {
  return (v) => {
    const b = v instanceof Uint8Array ? v : toBinary(schema, v as MessageShape<I>);
    return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  };
}

function deserializer<O extends DescMessage>(schema: O): (b: Buffer) => MessageShape<O> {
  return (b) => fromBinary(schema, b);
}

export interface CallOptions {
  /** Ends the call when it aborts. */
  signal?: AbortSignal;
  /** Gives up after this many milliseconds. */
  timeoutMs?: number;
}

/** The channel and the calls of the contract, with protobuf-es messages over grpc-js. */
export class Rpc {
  readonly channel: grpc.Client;
  private readonly token?: string;
  // Streams made and not yet ended, cancelled by close.
  private readonly streams = new Set<grpc.Call>();

  constructor(address: string, creds: grpc.ChannelCredentials, options: grpc.ChannelOptions, token?: string) {
    this.channel = new grpc.Client(address, creds, options);
    this.token = token;
  }

  metadata(): grpc.Metadata {
    // Every call waits for the broker while it is unreachable (restarting)
    // rather than failing at once; its signal or timeout bounds the wait.
    const md = new grpc.Metadata({ waitForReady: true });
    if (this.token !== undefined) md.set("authorization", `Bearer ${this.token}`);
    return md;
  }

  unary<I extends DescMessage, O extends DescMessage>(
    m: Method<I, O>,
    req: Wire<I>,
    opts: CallOptions = {},
  ): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      if (opts.signal?.aborted) return reject(new HarbingerError(Status.CANCELLED, "harbinger: call aborted"));
      const callOpts: grpc.CallOptions = {};
      if (opts.timeoutMs !== undefined) callOpts.deadline = new Date(Date.now() + opts.timeoutMs);
      let call: grpc.ClientUnaryCall;
      const onAbort = () => call?.cancel();
      try {
        call = this.channel.makeUnaryRequest(
          m.path,
          serializer(m.input),
          deserializer(m.output),
          req,
          this.metadata(),
          callOpts,
          (err, resp) => {
            opts.signal?.removeEventListener("abort", onAbort);
            if (err) reject(fromServiceError(err));
            else resolve(resp as MessageShape<O>);
          },
        );
      } catch (e) {
        // A closed channel refuses calls at once.
        return reject(new HarbingerError(Status.UNAVAILABLE, `harbinger: ${(e as Error).message}`));
      }
      opts.signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  bidi<I extends DescMessage, O extends DescMessage>(
    m: Method<I, O>,
  ): grpc.ClientDuplexStream<Wire<I>, MessageShape<O>> {
    const call = this.channel.makeBidiStreamRequest(m.path, serializer(m.input), deserializer(m.output), this.metadata());
    this.streams.add(call);
    call.on("status", () => this.streams.delete(call));
    return call;
  }

  /**
   * Cancels the open streams, then closes the channel: grpc-js lets calls
   * already made run on after a close, so a worker's Consume stream would
   * wait for ever on a closed client.
   */
  close(): void {
    for (const call of this.streams) call.cancel();
    this.streams.clear();
    this.channel.close();
  }
}

export type { GenMessage };
