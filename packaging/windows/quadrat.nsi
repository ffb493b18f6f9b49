; Per-user Windows installer for Quadrat (no administrator rights): installs the one-folder
; bundle (dist\Quadrat) into %LOCALAPPDATA%\Programs\Quadrat, a Start menu shortcut and an
; uninstaller listed under Apps. Libraries, judgments and settings live in the user's data
; folders, so an upgrade (installing over) and an uninstall keep them.
; makensis -DVERSION=0.1.0 -DPAYLOAD=..\..\dist\Quadrat -DOUTFILE=Quadrat-0.1.0-setup.exe quadrat.nsi
Unicode true
!ifndef VERSION
  !define VERSION "0.0.0"
!endif
!ifndef PAYLOAD
  !define PAYLOAD "..\..\dist\Quadrat"
!endif
!ifndef OUTFILE
  !define OUTFILE "Quadrat-${VERSION}-setup.exe"
!endif
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\Quadrat"

Name "Quadrat ${VERSION}"
OutFile "${OUTFILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\Quadrat"
InstallDirRegKey HKCU "Software\Quadrat" "InstallDir"
SetCompressor /SOLID lzma

!include "MUI2.nsh"
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Section "Quadrat" SecMain
  SetShellVarContext current
  ; The previous version's program files go first; user data is elsewhere and stays.
  RMDir /r "$INSTDIR\_internal"
  SetOutPath "$INSTDIR"
  File /r "${PAYLOAD}\*.*"
  WriteUninstaller "$INSTDIR\Uninstall.exe"
  CreateDirectory "$SMPROGRAMS\Quadrat"
  CreateShortcut "$SMPROGRAMS\Quadrat\Quadrat.lnk" "$INSTDIR\Quadrat.exe" "gui"
  WriteRegStr HKCU "Software\Quadrat" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "Quadrat"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
SectionEnd

Section "Uninstall"
  SetShellVarContext current
  Delete "$SMPROGRAMS\Quadrat\Quadrat.lnk"
  RMDir "$SMPROGRAMS\Quadrat"
  RMDir /r "$INSTDIR"
  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  DeleteRegKey HKCU "Software\Quadrat"
SectionEnd
