package openflow

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"unicode"
)

// Error types (ofp_error_type). Types 14-17 exist from OF1.4 on; in OF1.3
// OVS reports the same conditions as ONF experimenter errors.
const (
	ErrTypeHelloFailed         uint16 = 0
	ErrTypeBadRequest          uint16 = 1
	ErrTypeBadAction           uint16 = 2
	ErrTypeBadInstruction      uint16 = 3
	ErrTypeBadMatch            uint16 = 4
	ErrTypeFlowModFailed       uint16 = 5
	ErrTypeGroupModFailed      uint16 = 6
	ErrTypePortModFailed       uint16 = 7
	ErrTypeTableModFailed      uint16 = 8
	ErrTypeQueueOpFailed       uint16 = 9
	ErrTypeSwitchConfigFailed  uint16 = 10
	ErrTypeRoleRequestFailed   uint16 = 11
	ErrTypeMeterModFailed      uint16 = 12
	ErrTypeTableFeaturesFailed uint16 = 13
	ErrTypeBadProperty         uint16 = 14
	ErrTypeAsyncConfigFailed   uint16 = 15
	ErrTypeFlowMonitorFailed   uint16 = 16
	ErrTypeBundleFailed        uint16 = 17
	ErrTypeExperimenter        uint16 = 0xffff
)

var errTypeNames = map[uint16]string{
	ErrTypeHelloFailed:         "OFPET_HELLO_FAILED",
	ErrTypeBadRequest:          "OFPET_BAD_REQUEST",
	ErrTypeBadAction:           "OFPET_BAD_ACTION",
	ErrTypeBadInstruction:      "OFPET_BAD_INSTRUCTION",
	ErrTypeBadMatch:            "OFPET_BAD_MATCH",
	ErrTypeFlowModFailed:       "OFPET_FLOW_MOD_FAILED",
	ErrTypeGroupModFailed:      "OFPET_GROUP_MOD_FAILED",
	ErrTypePortModFailed:       "OFPET_PORT_MOD_FAILED",
	ErrTypeTableModFailed:      "OFPET_TABLE_MOD_FAILED",
	ErrTypeQueueOpFailed:       "OFPET_QUEUE_OP_FAILED",
	ErrTypeSwitchConfigFailed:  "OFPET_SWITCH_CONFIG_FAILED",
	ErrTypeRoleRequestFailed:   "OFPET_ROLE_REQUEST_FAILED",
	ErrTypeMeterModFailed:      "OFPET_METER_MOD_FAILED",
	ErrTypeTableFeaturesFailed: "OFPET_TABLE_FEATURES_FAILED",
	ErrTypeBadProperty:         "OFPET_BAD_PROPERTY",
	ErrTypeAsyncConfigFailed:   "OFPET_ASYNC_CONFIG_FAILED",
	ErrTypeFlowMonitorFailed:   "OFPET_FLOW_MONITOR_FAILED",
	ErrTypeBundleFailed:        "OFPET_BUNDLE_FAILED",
	ErrTypeExperimenter:        "OFPET_EXPERIMENTER",
}

// errorCodeEntry names one error code for a range of versions. For standard
// errors exp is 0 and typ/code are the ofp_error_msg type and code; for
// experimenter errors (type 0xffff) exp is the experimenter id and code the
// exp_code. The names are the ones Open vSwitch prints.
type errorCodeEntry struct {
	min, max Version
	exp      uint32
	typ      uint16
	code     uint16
	name     string
}

// errStd and errExp build table rows.
func errStd(min, max Version, typ, code uint16, name string) errorCodeEntry {
	return errorCodeEntry{min: min, max: max, typ: typ, code: code, name: name}
}

func errExp(min, max Version, exp uint32, code uint16, name string) errorCodeEntry {
	return errorCodeEntry{min: min, max: max, exp: exp, typ: ErrTypeExperimenter, code: code, name: name}
}

// errorCodes lists every error code Open vSwitch 3.1 knows for OF1.3-OF1.5
// (checked against `ovs-ofctl ofp-print` by the tests).
var errorCodes = []errorCodeEntry{
	errStd(Version13, Version15, 0, 0, "OFPHFC_INCOMPATIBLE"),
	errStd(Version13, Version15, 0, 1, "OFPHFC_EPERM"),

	errStd(Version13, Version15, 1, 0, "OFPBRC_BAD_VERSION"),
	errStd(Version13, Version15, 1, 1, "OFPBRC_BAD_TYPE"),
	errStd(Version13, Version15, 1, 2, "OFPBRC_BAD_STAT"),
	errStd(Version13, Version15, 1, 3, "OFPBRC_BAD_VENDOR"),
	errStd(Version13, Version15, 1, 4, "OFPBRC_BAD_SUBTYPE"),
	errStd(Version13, Version15, 1, 5, "OFPBRC_EPERM"),
	errStd(Version13, Version15, 1, 6, "OFPBRC_BAD_LEN"),
	errStd(Version13, Version15, 1, 7, "OFPBRC_BUFFER_EMPTY"),
	errStd(Version13, Version15, 1, 8, "OFPBRC_BUFFER_UNKNOWN"),
	errStd(Version13, Version15, 1, 9, "OFPBRC_BAD_TABLE_ID"),
	errStd(Version13, Version15, 1, 10, "OFPBRC_IS_SECONDARY"),
	errStd(Version13, Version15, 1, 11, "OFPBRC_BAD_PORT"),
	errStd(Version13, Version15, 1, 12, "OFPBRC_BAD_PACKET"),
	errStd(Version13, Version15, 1, 13, "OFPBRC_MULTIPART_BUFFER_OVERFLOW"),
	errStd(Version14, Version15, 1, 14, "OFPBRC_MULTIPART_REQUEST_TIMEOUT"),
	errStd(Version14, Version15, 1, 15, "OFPBRC_MULTIPART_REPLY_TIMEOUT"),
	errStd(Version15, Version15, 1, 16, "OFPBRC_MULTIPART_BAD_SCHED"),
	errStd(Version15, Version15, 1, 17, "OFPBRC_PIPELINE_FIELDS_ONLY"),
	errStd(Version15, Version15, 1, 18, "OFPBRC_UNKNOWN"),

	errStd(Version13, Version15, 2, 0, "OFPBAC_BAD_TYPE"),
	errStd(Version13, Version15, 2, 1, "OFPBAC_BAD_LEN"),
	errStd(Version13, Version15, 2, 2, "OFPBAC_BAD_VENDOR"),
	errStd(Version13, Version15, 2, 3, "OFPBAC_BAD_VENDOR_TYPE"),
	errStd(Version13, Version15, 2, 4, "OFPBAC_BAD_OUT_PORT"),
	errStd(Version13, Version15, 2, 5, "OFPBAC_BAD_ARGUMENT"),
	errStd(Version13, Version15, 2, 6, "OFPBAC_EPERM"),
	errStd(Version13, Version15, 2, 7, "OFPBAC_TOO_MANY"),
	errStd(Version13, Version15, 2, 8, "OFPBAC_BAD_QUEUE"),
	errStd(Version13, Version15, 2, 9, "OFPBAC_BAD_OUT_GROUP"),
	errStd(Version13, Version15, 2, 10, "OFPBAC_MATCH_INCONSISTENT"),
	errStd(Version13, Version15, 2, 11, "OFPBAC_UNSUPPORTED_ORDER"),
	errStd(Version13, Version15, 2, 12, "OFPBAC_BAD_TAG"),
	errStd(Version13, Version15, 2, 13, "OFPBAC_BAD_SET_TYPE"),
	errStd(Version13, Version15, 2, 14, "OFPBAC_BAD_SET_LEN"),
	errStd(Version13, Version15, 2, 15, "OFPBAC_BAD_SET_ARGUMENT"),
	errStd(Version15, Version15, 2, 16, "OFPBAC_BAD_SET_MASK"),
	errStd(Version15, Version15, 2, 17, "OFPBAC_BAD_METER"),

	errStd(Version13, Version15, 3, 0, "OFPBIC_UNKNOWN_INST"),
	errStd(Version13, Version15, 3, 1, "OFPBIC_UNSUP_INST"),
	errStd(Version13, Version15, 3, 2, "OFPBIC_BAD_TABLE_ID"),
	errStd(Version13, Version15, 3, 3, "OFPBIC_UNSUP_METADATA"),
	errStd(Version13, Version15, 3, 4, "OFPBIC_UNSUP_METADATA_MASK"),
	errStd(Version13, Version15, 3, 5, "OFPBIC_BAD_EXPERIMENTER"),
	errStd(Version13, Version15, 3, 6, "OFPBIC_BAD_EXP_TYPE"),
	errStd(Version13, Version15, 3, 7, "OFPBIC_BAD_LEN"),
	errStd(Version13, Version15, 3, 8, "OFPBIC_EPERM"),
	errStd(Version14, Version15, 3, 9, "OFPBIC_DUP_INST"),

	errStd(Version13, Version15, 4, 0, "OFPBMC_BAD_TYPE"),
	errStd(Version13, Version15, 4, 1, "OFPBMC_BAD_LEN"),
	errStd(Version13, Version15, 4, 2, "OFPBMC_BAD_TAG"),
	errStd(Version13, Version15, 4, 3, "OFPBMC_BAD_DL_ADDR_MASK"),
	errStd(Version13, Version15, 4, 4, "OFPBMC_BAD_NW_ADDR_MASK"),
	errStd(Version13, Version15, 4, 5, "OFPBMC_BAD_WILDCARDS"),
	errStd(Version13, Version15, 4, 6, "OFPBMC_BAD_FIELD"),
	errStd(Version13, Version15, 4, 7, "OFPBMC_BAD_VALUE"),
	errStd(Version13, Version15, 4, 8, "OFPBMC_BAD_MASK"),
	errStd(Version13, Version15, 4, 9, "OFPBMC_BAD_PREREQ"),
	errStd(Version13, Version15, 4, 10, "OFPBMC_DUP_FIELD"),
	errStd(Version13, Version15, 4, 11, "OFPBMC_EPERM"),

	errStd(Version13, Version15, 5, 0, "OFPFMFC_UNKNOWN"),
	errStd(Version13, Version15, 5, 1, "OFPFMFC_TABLE_FULL"),
	errStd(Version13, Version15, 5, 2, "OFPFMFC_BAD_TABLE_ID"),
	errStd(Version13, Version15, 5, 3, "OFPFMFC_OVERLAP"),
	errStd(Version13, Version15, 5, 4, "OFPFMFC_EPERM"),
	errStd(Version13, Version15, 5, 5, "OFPFMFC_BAD_TIMEOUT"),
	errStd(Version13, Version15, 5, 6, "OFPFMFC_BAD_COMMAND"),
	errStd(Version13, Version15, 5, 7, "OFPFMFC_BAD_FLAGS"),
	errStd(Version14, Version15, 5, 8, "OFPFMFC_CANT_SYNC"),
	errStd(Version14, Version15, 5, 9, "OFPFMFC_BAD_PRIORITY"),
	errStd(Version14, Version15, 5, 10, "OFPFMFC_IS_SYNC"),

	errStd(Version13, Version15, 6, 0, "OFPGMFC_GROUP_EXISTS"),
	errStd(Version13, Version15, 6, 1, "OFPGMFC_INVALID_GROUP"),
	errStd(Version13, Version15, 6, 2, "OFPGMFC_WEIGHT_UNSUPPORTED"),
	errStd(Version13, Version15, 6, 3, "OFPGMFC_OUT_OF_GROUPS"),
	errStd(Version13, Version15, 6, 4, "OFPGMFC_OUT_OF_BUCKETS"),
	errStd(Version13, Version15, 6, 5, "OFPGMFC_CHAINING_UNSUPPORTED"),
	errStd(Version13, Version15, 6, 6, "OFPGMFC_WATCH_UNSUPPORTED"),
	errStd(Version13, Version15, 6, 7, "OFPGMFC_LOOP"),
	errStd(Version13, Version15, 6, 8, "OFPGMFC_UNKNOWN_GROUP"),
	errStd(Version13, Version15, 6, 9, "OFPGMFC_CHAINED_GROUP"),
	errStd(Version13, Version15, 6, 10, "OFPGMFC_BAD_TYPE"),
	errStd(Version13, Version15, 6, 11, "OFPGMFC_BAD_COMMAND"),
	errStd(Version13, Version15, 6, 12, "OFPGMFC_BAD_BUCKET"),
	errStd(Version13, Version15, 6, 13, "OFPGMFC_BAD_WATCH"),
	errStd(Version13, Version15, 6, 14, "OFPGMFC_EPERM"),
	errStd(Version15, Version15, 6, 15, "OFPGMFC_UNKNOWN_BUCKET"),
	errStd(Version15, Version15, 6, 16, "OFPGMFC_BUCKET_EXISTS"),

	errStd(Version13, Version15, 7, 0, "OFPPMFC_BAD_PORT"),
	errStd(Version13, Version15, 7, 1, "OFPPMFC_BAD_HW_ADDR"),
	errStd(Version13, Version15, 7, 2, "OFPPMFC_BAD_CONFIG"),
	errStd(Version13, Version15, 7, 3, "OFPPMFC_BAD_ADVERTISE"),
	errStd(Version13, Version15, 7, 4, "OFPPMFC_EPERM"),

	errStd(Version13, Version15, 8, 0, "OFPTMFC_BAD_TABLE"),
	errStd(Version13, Version15, 8, 1, "OFPTMFC_BAD_CONFIG"),
	errStd(Version13, Version15, 8, 2, "OFPTMFC_EPERM"),

	errStd(Version13, Version15, 9, 0, "OFPQOFC_BAD_PORT"),
	errStd(Version13, Version15, 9, 1, "OFPQOFC_BAD_QUEUE"),
	errStd(Version13, Version15, 9, 2, "OFPQOFC_EPERM"),

	errStd(Version13, Version15, 10, 0, "OFPSCFC_BAD_FLAGS"),
	errStd(Version13, Version15, 10, 1, "OFPSCFC_BAD_LEN"),
	errStd(Version13, Version15, 10, 2, "OFPSCFC_EPERM"),

	errStd(Version13, Version15, 11, 0, "OFPRRFC_STALE"),
	errStd(Version13, Version15, 11, 1, "OFPRRFC_UNSUP"),
	errStd(Version13, Version15, 11, 2, "OFPRRFC_BAD_ROLE"),
	errStd(Version15, Version15, 11, 3, "OFPRRFC_ID_UNSUP"),
	errStd(Version15, Version15, 11, 4, "OFPRRFC_ID_IN_USE"),

	errStd(Version13, Version15, 12, 0, "OFPMMFC_UNKNOWN"),
	errStd(Version13, Version15, 12, 1, "OFPMMFC_METER_EXISTS"),
	errStd(Version13, Version15, 12, 2, "OFPMMFC_INVALID_METER"),
	errStd(Version13, Version15, 12, 3, "OFPMMFC_UNKNOWN_METER"),
	errStd(Version13, Version15, 12, 4, "OFPMMFC_BAD_COMMAND"),
	errStd(Version13, Version15, 12, 5, "OFPMMFC_BAD_FLAGS"),
	errStd(Version13, Version15, 12, 6, "OFPMMFC_BAD_RATE"),
	errStd(Version13, Version15, 12, 7, "OFPMMFC_BAD_BURST"),
	errStd(Version13, Version15, 12, 8, "OFPMMFC_BAD_BAND"),
	errStd(Version13, Version15, 12, 9, "OFPMMFC_BAD_BAND_VALUE"),
	errStd(Version13, Version15, 12, 10, "OFPMMFC_OUT_OF_METERS"),
	errStd(Version13, Version15, 12, 11, "OFPMMFC_OUT_OF_BANDS"),

	errStd(Version13, Version15, 13, 0, "OFPTFFC_BAD_TABLE"),
	errStd(Version13, Version15, 13, 1, "OFPTFFC_BAD_METADATA"),
	// OVS reports OF1.3 table-features property errors under type 13.
	errStd(Version13, Version13, 13, 2, "OFPBPC_BAD_TYPE"),
	errStd(Version13, Version13, 13, 3, "OFPBPC_BAD_LEN"),
	errStd(Version13, Version13, 13, 4, "OFPBPC_BAD_VALUE"),
	errStd(Version13, Version15, 13, 5, "OFPTFFC_EPERM"),
	errStd(Version15, Version15, 13, 6, "OFPTFFC_BAD_CAPA"),
	errStd(Version15, Version15, 13, 7, "OFPTFFC_BAD_MAX_ENT"),
	errStd(Version15, Version15, 13, 8, "OFPTFFC_BAD_FEATURES"),
	errStd(Version15, Version15, 13, 9, "OFPTFFC_BAD_COMMAND"),
	errStd(Version15, Version15, 13, 10, "OFPTFFC_TOO_MANY"),

	errStd(Version14, Version15, 14, 0, "OFPBPC_BAD_TYPE"),
	errStd(Version14, Version15, 14, 1, "OFPBPC_BAD_LEN"),
	errStd(Version14, Version15, 14, 2, "OFPBPC_BAD_VALUE"),
	errStd(Version14, Version15, 14, 3, "OFPBPC_TOO_MANY"),
	errStd(Version14, Version15, 14, 4, "OFPBPC_DUP_TYPE"),
	errStd(Version14, Version15, 14, 5, "OFPBPC_BAD_EXPERIMENTER"),
	errStd(Version14, Version15, 14, 6, "OFPBPC_BAD_EXP_TYPE"),
	errStd(Version14, Version15, 14, 7, "OFPBPC_BAD_EXP_VALUE"),
	errStd(Version14, Version15, 14, 8, "OFPBPC_EPERM"),

	errStd(Version14, Version15, 15, 0, "OFPACFC_INVALID"),
	errStd(Version14, Version15, 15, 1, "OFPACFC_UNSUPPORTED"),
	errStd(Version14, Version15, 15, 2, "OFPACFC_EPERM"),

	errStd(Version14, Version15, 16, 0, "OFPMOFC_UNKNOWN"),
	errStd(Version14, Version15, 16, 1, "OFPMOFC_MONITOR_EXISTS"),
	errStd(Version14, Version15, 16, 2, "OFPMOFC_INVALID_MONITOR"),
	errStd(Version14, Version15, 16, 3, "OFPMOFC_UNKNOWN_MONITOR"),
	errStd(Version14, Version15, 16, 4, "OFPMOFC_BAD_COMMAND"),
	errStd(Version14, Version15, 16, 5, "OFPMOFC_BAD_FLAGS"),
	errStd(Version14, Version15, 16, 6, "OFPMOFC_BAD_TABLE_ID"),
	errStd(Version14, Version15, 16, 7, "OFPMOFC_BAD_OUT"),

	errStd(Version14, Version15, 17, 0, "OFPBFC_UNKNOWN"),
	errStd(Version14, Version15, 17, 1, "OFPBFC_EPERM"),
	errStd(Version14, Version15, 17, 2, "OFPBFC_BAD_ID"),
	errStd(Version14, Version15, 17, 3, "OFPBFC_BUNDLE_EXIST"),
	errStd(Version14, Version15, 17, 4, "OFPBFC_BUNDLE_CLOSED"),
	errStd(Version14, Version15, 17, 5, "OFPBFC_OUT_OF_BUNDLES"),
	errStd(Version14, Version15, 17, 6, "OFPBFC_BAD_TYPE"),
	errStd(Version14, Version15, 17, 7, "OFPBFC_BAD_FLAGS"),
	errStd(Version14, Version15, 17, 8, "OFPBFC_MSG_BAD_LEN"),
	errStd(Version14, Version15, 17, 9, "OFPBFC_MSG_BAD_XID"),
	errStd(Version14, Version15, 17, 10, "OFPBFC_MSG_UNSUP"),
	errStd(Version14, Version15, 17, 11, "OFPBFC_MSG_CONFLICT"),
	errStd(Version14, Version15, 17, 12, "OFPBFC_MSG_TOO_MANY"),
	errStd(Version14, Version15, 17, 13, "OFPBFC_MSG_FAILED"),
	errStd(Version14, Version15, 17, 14, "OFPBFC_TIMEOUT"),
	errStd(Version14, Version15, 17, 15, "OFPBFC_BUNDLE_IN_PROGRESS"),
	errStd(Version15, Version15, 17, 16, "OFPBFC_SCHED_NOT_SUPPORTED"),
	errStd(Version15, Version15, 17, 17, "OFPBFC_SCHED_FUTURE"),
	errStd(Version15, Version15, 17, 18, "OFPBFC_SCHED_PAST"),

	// Nicira experimenter errors.
	errExp(Version13, Version15, ExperimenterNicira, 2, "NXBRC_NXM_INVALID"),
	errExp(Version13, Version15, ExperimenterNicira, 3, "NXBRC_NXM_BAD_TYPE"),
	errExp(Version13, Version15, ExperimenterNicira, 4, "NXBRC_MUST_BE_ZERO"),
	errExp(Version13, Version15, ExperimenterNicira, 5, "NXBRC_BAD_REASON"),
	errExp(Version13, Version13, ExperimenterNicira, 6, "OFPMOFC_MONITOR_EXISTS"),
	errExp(Version13, Version13, ExperimenterNicira, 7, "OFPMOFC_BAD_FLAGS"),
	errExp(Version13, Version13, ExperimenterNicira, 8, "OFPMOFC_UNKNOWN_MONITOR"),
	errExp(Version13, Version15, ExperimenterNicira, 9, "NXBRC_FM_BAD_EVENT"),
	errExp(Version13, Version15, ExperimenterNicira, 10, "NXBRC_UNENCODABLE_ERROR"),
	errExp(Version13, Version15, ExperimenterNicira, 11, "NXBAC_MUST_BE_ZERO"),
	errExp(Version13, Version15, ExperimenterNicira, 12, "NXFMFC_HARDWARE"),
	errExp(Version13, Version15, ExperimenterNicira, 13, "NXFMFC_BAD_TABLE_ID"),
	errExp(Version13, Version15, ExperimenterNicira, 15, "NXBAC_BAD_CONJUNCTION"),
	errExp(Version13, Version15, ExperimenterNicira, 16, "NXTTMFC_BAD_COMMAND"),
	errExp(Version13, Version15, ExperimenterNicira, 17, "NXTTMFC_BAD_OPT_LEN"),
	errExp(Version13, Version15, ExperimenterNicira, 18, "NXTTMFC_BAD_FIELD_IDX"),
	errExp(Version13, Version15, ExperimenterNicira, 19, "NXTTMFC_TABLE_FULL"),
	errExp(Version13, Version15, ExperimenterNicira, 20, "NXTTMFC_ALREADY_MAPPED"),
	errExp(Version13, Version15, ExperimenterNicira, 21, "NXTTMFC_DUP_ENTRY"),
	errExp(Version14, Version15, ExperimenterNicira, 22, "OFPBFC_BAD_VERSION"),
	errExp(Version14, Version15, ExperimenterNicira, 23, "NXQOFC_QUEUE_ERROR"),
	errExp(Version13, Version15, ExperimenterNicira, 34, "NXR_NOT_SUPPORTED"),
	errExp(Version13, Version15, ExperimenterNicira, 35, "NXR_STALE"),
	errExp(Version13, Version15, ExperimenterNicira, 36, "NXST_NOT_CONFIGURED"),
	errExp(Version13, Version15, ExperimenterNicira, 37, "NXFMFC_INVALID_TLV_FIELD"),
	errExp(Version13, Version15, ExperimenterNicira, 38, "NXTTMFC_INVALID_TLV_DEL"),
	errExp(Version13, Version15, ExperimenterNicira, 39, "NXBAC_BAD_HEADER_TYPE"),
	errExp(Version13, Version15, ExperimenterNicira, 40, "NXBAC_UNKNOWN_ED_PROP"),
	errExp(Version13, Version15, ExperimenterNicira, 41, "NXBAC_BAD_ED_PROP"),
	errExp(Version13, Version15, ExperimenterNicira, 42, "NXBAC_CT_DATAPATH_SUPPORT"),
	errExp(Version13, Version15, ExperimenterNicira, 43, "NXBMC_CT_DATAPATH_SUPPORT"),
	errExp(Version13, Version15, ExperimenterNicira, 44, "NXTFFC_DUP_TABLE"),

	// ONF experimenter errors: OF1.3 spellings of OF1.4+ codes.
	errExp(Version13, Version13, ExperimenterONF, 2300, "OFPBFC_UNKNOWN"),
	errExp(Version13, Version13, ExperimenterONF, 2301, "OFPBFC_EPERM"),
	errExp(Version13, Version13, ExperimenterONF, 2302, "OFPBFC_BAD_ID"),
	errExp(Version13, Version13, ExperimenterONF, 2303, "OFPBFC_BUNDLE_EXIST"),
	errExp(Version13, Version13, ExperimenterONF, 2304, "OFPBFC_BUNDLE_CLOSED"),
	errExp(Version13, Version13, ExperimenterONF, 2305, "OFPBFC_OUT_OF_BUNDLES"),
	errExp(Version13, Version13, ExperimenterONF, 2306, "OFPBFC_BAD_TYPE"),
	errExp(Version13, Version13, ExperimenterONF, 2307, "OFPBFC_BAD_FLAGS"),
	errExp(Version13, Version13, ExperimenterONF, 2308, "OFPBFC_MSG_BAD_LEN"),
	errExp(Version13, Version13, ExperimenterONF, 2309, "OFPBFC_MSG_BAD_XID"),
	errExp(Version13, Version13, ExperimenterONF, 2310, "OFPBFC_MSG_UNSUP"),
	errExp(Version13, Version13, ExperimenterONF, 2311, "OFPBFC_MSG_CONFLICT"),
	errExp(Version13, Version13, ExperimenterONF, 2312, "OFPBFC_MSG_TOO_MANY"),
	errExp(Version13, Version13, ExperimenterONF, 2313, "OFPBFC_MSG_FAILED"),
	errExp(Version13, Version13, ExperimenterONF, 2314, "OFPBFC_TIMEOUT"),
	errExp(Version13, Version13, ExperimenterONF, 2315, "OFPBFC_BUNDLE_IN_PROGRESS"),
	errExp(Version13, Version13, ExperimenterONF, 2360, "OFPFMFC_BAD_PRIORITY"),
	errExp(Version13, Version13, ExperimenterONF, 2370, "OFPACFC_INVALID"),
	errExp(Version13, Version13, ExperimenterONF, 2371, "OFPACFC_UNSUPPORTED"),
	errExp(Version13, Version13, ExperimenterONF, 2372, "OFPACFC_EPERM"),
	errExp(Version13, Version13, ExperimenterONF, 2600, "OFPBIC_DUP_INST"),
	errExp(Version13, Version13, ExperimenterONF, 2640, "OFPBRC_MULTIPART_REQUEST_TIMEOUT"),
	errExp(Version13, Version13, ExperimenterONF, 2641, "OFPBRC_MULTIPART_REPLY_TIMEOUT"),
	errExp(Version13, Version14, ExperimenterONF, 4250, "OFPBAC_BAD_SET_MASK"),
	errExp(Version13, Version13, ExperimenterONF, 4443, "OFPBPC_TOO_MANY"),
	errExp(Version13, Version13, ExperimenterONF, 4444, "OFPBPC_DUP_TYPE"),
	errExp(Version13, Version13, ExperimenterONF, 4445, "OFPBPC_BAD_EXPERIMENTER"),
	errExp(Version13, Version13, ExperimenterONF, 4446, "OFPBPC_BAD_EXP_TYPE"),
	errExp(Version13, Version13, ExperimenterONF, 4447, "OFPBPC_BAD_EXP_VALUE"),
	errExp(Version13, Version13, ExperimenterONF, 4448, "OFPBPC_EPERM"),
}

// errKey identifies an error code in one version.
type errKey struct {
	v    Version
	exp  uint32
	typ  uint16
	code uint16
}

type errNameKey struct {
	v    Version
	name string
}

var (
	errorNames  = map[errKey]string{}
	errorByName = map[errNameKey]errKey{}
)

func init() {
	for _, e := range errorCodes {
		for v := e.min; v <= e.max; v++ {
			k := errKey{v, e.exp, e.typ, e.code}
			if _, dup := errorNames[k]; dup {
				panic(fmt.Sprintf("openflow: duplicate error code %+v", k))
			}
			errorNames[k] = e.name
			errorByName[errNameKey{v, e.name}] = k
		}
	}
}

// tableVersion maps a version onto the one whose error table applies:
// versions after OF1.5 use OF1.5's. Before OF1.3 only the hello-failed and
// bad-request codes, which never changed, are named.
func tableVersion(v Version, typ uint16) (Version, bool) {
	switch {
	case v > Version15:
		return Version15, true
	case v < Version13:
		return Version13, typ == ErrTypeHelloFailed || typ == ErrTypeBadRequest
	}
	return v, true
}

// ErrorName returns Open vSwitch's name for an error code of version v, such
// as "OFPBAC_BAD_OUT_GROUP" or "NXBRC_MUST_BE_ZERO", and whether it is known.
// For experimenter errors typ is ErrTypeExperimenter and code the exp_code.
func ErrorName(v Version, typ, code uint16, experimenter uint32) (string, bool) {
	tv, ok := tableVersion(v, typ)
	if !ok {
		return "", false
	}
	if typ != ErrTypeExperimenter {
		experimenter = 0
	}
	name, ok := errorNames[errKey{tv, experimenter, typ, code}]
	return name, ok
}

// LookupError returns the type, code and experimenter id that version v uses
// for the error called name (as ErrorName spells it). The same name may map
// to different codes in different versions: OFPBFC_MSG_FAILED is type 17
// code 13 in OF1.5 but ONF experimenter code 2313 in OF1.3.
func LookupError(v Version, name string) (typ, code uint16, experimenter uint32, ok bool) {
	tv, _ := tableVersion(v, 0)
	k, ok := errorByName[errNameKey{tv, name}]
	if !ok {
		return 0, 0, 0, false
	}
	return k.typ, k.code, k.exp, true
}

// NewError builds the error that version v uses for name, carrying data (by
// convention the failed request). It returns nil if v has no such error.
func NewError(v Version, name string, data []byte) *OFError {
	typ, code, exp, ok := LookupError(v, name)
	if !ok {
		return nil
	}
	return &OFError{Version: v, Type: typ, Code: code, Experimenter: exp, Data: clone(data)}
}

// OFError is an OFPT_ERROR message, and a Go error.
//
// Layout after the header:
//
//	2 bytes: type (0xffff = experimenter)
//	2 bytes: code (exp_code for experimenter errors)
//	4 bytes: experimenter id (only when type is 0xffff)
//	rest:    data, usually the failed request (OVS sends all of it); for
//	         HELLO_FAILED an ASCII explanation
//
// The decoded Data is a copy of the input.
type OFError struct {
	// Version is the version the error was received in. Names depend on it;
	// encoding uses the version passed to Marshal instead.
	Version      Version
	Type         uint16
	Code         uint16
	Experimenter uint32 // only when Type is ErrTypeExperimenter
	Data         []byte
}

func init() {
	registerType(TypeError, decodeError)
}

func decodeError(h Header, body []byte) (Message, error) {
	if err := need(body, 4, "error"); err != nil {
		return nil, err
	}
	e := &OFError{
		Version: h.Version,
		Type:    binary.BigEndian.Uint16(body[0:2]),
		Code:    binary.BigEndian.Uint16(body[2:4]),
	}
	body = body[4:]
	if e.Type == ErrTypeExperimenter {
		if err := need(body, 4, "error: experimenter"); err != nil {
			return nil, err
		}
		e.Experimenter = binary.BigEndian.Uint32(body[0:4])
		body = body[4:]
	}
	e.Data = clone(body)
	return e, nil
}

func (e *OFError) appendBody(b []byte, v Version) (MsgType, []byte, error) {
	b = binary.BigEndian.AppendUint16(b, e.Type)
	b = binary.BigEndian.AppendUint16(b, e.Code)
	if e.Type == ErrTypeExperimenter {
		b = binary.BigEndian.AppendUint32(b, e.Experimenter)
	}
	return TypeError, append(b, e.Data...), nil
}

// Name returns Open vSwitch's name for the error, e.g. "OFPBAC_BAD_OUT_GROUP".
// An unknown code gets a name built from its type, e.g.
// "OFPET_BAD_ACTION code 99" or "OFPET_EXPERIMENTER 0x1234 code 5".
func (e *OFError) Name() string {
	if name, ok := ErrorName(e.Version, e.Type, e.Code, e.Experimenter); ok {
		return name
	}
	if e.Type == ErrTypeExperimenter {
		return fmt.Sprintf("OFPET_EXPERIMENTER 0x%x code %d", e.Experimenter, e.Code)
	}
	if tn, ok := errTypeNames[e.Type]; ok {
		return fmt.Sprintf("%s code %d", tn, e.Code)
	}
	return fmt.Sprintf("OFPET type %d code %d", e.Type, e.Code)
}

// Error returns the name and the numbers, e.g.
// "OFPBAC_BAD_OUT_GROUP (type 2 code 9)" or
// "NXBRC_MUST_BE_ZERO (experimenter 0x2320 code 4)". A HELLO_FAILED error
// also quotes the switch's explanation.
func (e *OFError) Error() string {
	var s string
	if e.Type == ErrTypeExperimenter {
		s = fmt.Sprintf("%s (experimenter 0x%x code %d)", e.Name(), e.Experimenter, e.Code)
	} else {
		s = fmt.Sprintf("%s (type %d code %d)", e.Name(), e.Type, e.Code)
	}
	if e.Type == ErrTypeHelloFailed && len(e.Data) > 0 {
		s += ": " + strconv.Quote(printable(e.Data))
	}
	return s
}

// printable trims the trailing NULs and newlines an explanation may carry.
func printable(b []byte) string {
	s := string(b)
	for len(s) > 0 {
		r := rune(s[len(s)-1])
		if r != 0 && !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

// Is reports whether target is an *OFError for the same condition: the same
// name when both are known (so OF1.3's ONF bundle errors match OF1.5's
// type 17 codes), else the same type, code and experimenter. Data is ignored.
func (e *OFError) Is(target error) bool {
	t, ok := target.(*OFError)
	if !ok || t == nil {
		return false
	}
	n1, ok1 := ErrorName(e.Version, e.Type, e.Code, e.Experimenter)
	n2, ok2 := ErrorName(t.Version, t.Type, t.Code, t.Experimenter)
	if ok1 && ok2 {
		return n1 == n2
	}
	return e.Type == t.Type && e.Code == t.Code && (e.Type != ErrTypeExperimenter || e.Experimenter == t.Experimenter)
}

// Request decodes Data as the failed request. Data may hold only a prefix of
// the request (the spec requires at least 64 bytes; OVS sends everything), in
// which case the error wraps io.ErrUnexpectedEOF.
func (e *OFError) Request() (Header, Message, error) {
	n, err := MessageLen(e.Data)
	if err != nil {
		return Header{}, nil, fmt.Errorf("openflow: error data: %w", err)
	}
	if n > len(e.Data) {
		h, _, err := Unmarshal(e.Data)
		return h, nil, fmt.Errorf("openflow: error data: %w", err)
	}
	return Unmarshal(e.Data[:n])
}
