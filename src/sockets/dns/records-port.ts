/**
 * What the dhcp provider asks of the dns provider for a reservation with `dns: true`: records
 * added and removed as one step, all or nothing. The dns provider implements it (and keeps the
 * records in its database like the ones added through `dns:record_add`).
 */
export type DnsRecordType = 'A' | 'AAAA' | 'CNAME' | 'TXT' | 'PTR';

export interface DnsRecordInput {
  name: string;
  type: DnsRecordType;
  data: string;
  ttl?: number;
}

export interface DnsRecord {
  name: string;
  type: DnsRecordType;
  ttl: number;
  data: string;
}

export interface AddRecordsOptions {
  reverseOf?: string;
  owner?: string;
  exclusive?: boolean;
}

export interface DnsRecordsPort {
  /**
   * Adds the records, every one or none (a conflict or a name outside the zones refuses all,
   * as a SocketError). `reverseOf`, a subnet in CIDR form, also allows PTR records in that
   * subnet's reverse zone. `owner` tags the records (e.g. the reservation that made them).
   * `exclusive`: a name that holds a record of the same type already (whatever its data) is a
   * conflict too (a host's A record, an address's PTR: one host per name, one name per address).
   */
  addRecords(records: DnsRecordInput[], opts?: AddRecordsOptions): Promise<DnsRecord[]>;
  /** Removes exactly these records (others of the same name stay); answers how many were removed. */
  removeRecords(records: DnsRecordInput[]): Promise<number>;
}
